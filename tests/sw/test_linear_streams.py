"""The linear kernel's command streams are byte-identical to those of the planner before it
was split into modules and typed operations (commit 844ebba): SHA-256 of each plan, its encoded
commands (wrapping semaphore targets, odd addresses, ReLU) and its DRAM traffic, for the
planned shapes of ``test_linear``, larger and odd shapes on nine configurations, regions, both
the double-buffered and the serialized plan, and the hand-picked tilings of ``FORCED``.

The double-buffered digests were regenerated once since, on purpose, for issue 13's pipelined
matrix engine: the planner's MATMUL cost became the back-to-back period
(:func:`sw.kernels.linear.matmul_cycles`) and consecutive K blocks became one MATMUL
(``k_blocks``); the serialized plans' streams are unchanged."""

import hashlib
import json
from types import SimpleNamespace

import pytest

from hw.config import NPUConfig
from sw.kernels.linear import (
    build_linear_commands,
    build_linear_commands_double_buffered,
    double_buffered_plan,
    linear_dram_bytes,
    plan_linear,
)
from tests.sw.test_linear import FORCED

CONFIGS = {
    "8x8": NPUConfig(), "4x4": NPUConfig(rows=4, cols=4), "16x16": NPUConfig(rows=16, cols=16),
    "4x8s": NPUConfig(rows=4, cols=8, spad_rows=256, acc_rows=64),
    "tiny4": NPUConfig(rows=4, cols=4, spad_rows=64, acc_rows=16),
    "tiny8": NPUConfig(spad_rows=64, acc_rows=16),
    "bus32": NPUConfig(axi_data_bits=32), "bus128": NPUConfig(axi_data_bits=128),
    "fifo1": NPUConfig(cmd_fifo_depth=1, acc_rows=64, spad_rows=1024),
    "fifo4": NPUConfig(cmd_fifo_depth=4),
    "8x4": NPUConfig(rows=8, cols=4, acc_rows=32, spad_rows=512),
    "32x32": NPUConfig(rows=32, cols=32),
}


class _Sem:
    def __init__(self, sem_id: int, base: int) -> None:
        self.id, self.base = sem_id, base

    def target(self, n: int = 0) -> int:
        return (self.base + n) & 0xFFFF_FFFF


def digest(config, plan) -> str:
    """SHA-256 of the plan, its command stream over fixed buffers and its DRAM bytes."""
    bufs = [SimpleNamespace(addr=a) for a in (0x1000, 0x20000, 0x40000, 0x60000)]
    text = repr(plan)
    for name in ("w_fmt", "a_fmt", "x_base"):      # the int8 plans of before the formats
        text = text.replace(f", {name}=0", "")
    text = text.replace(", gelu=False", "")        # REQUANT plans of before the GELU epilogue
    h = hashlib.sha256(text.encode())
    if plan.double_buffer:
        sems = {x: _Sem(i + 3, 0xFFFF_FFF0 + 5 * i) for i, x in enumerate("LMRS")}
        cmds, issued = build_linear_commands_double_buffered(config, plan, *bufs, True, sems)
        h.update(json.dumps(issued, sort_keys=True).encode())
    else:
        cmds = build_linear_commands(config, plan, *bufs, True, 0xFFFF_FFFA, 5)
    for c in cmds:
        h.update(c.raw)
    h.update(json.dumps(linear_dram_bytes(config, plan), sort_keys=True).encode())
    return h.hexdigest()


# (config, M, K, N, double_buffer, spad_region, acc_region): digest
PLANNED = {
    ("16x16", 64, 64, 64, True, None, None):
        "25b98b6720be47dceba7eaa09afada88b5ec194201ad4cb89324039dbb4b419e",
    ("16x16", 64, 64, 64, False, None, None):
        "27d2ab4a811dda7f08287709581b99bb52908fbb459cff793f065cba78c04b74",
    ("16x16", 128, 128, 128, True, None, None):
        "e813e0284696eed61df5976576e3f4292dcebaeed865f1c5339e50468ede7cfd",
    ("16x16", 128, 128, 128, False, None, None):
        "bff51be07107eeec3597b35fb7d0dd3914c30e47b7dfdf6479852322dc8e985f",
    ("16x16", 256, 256, 256, True, None, None):
        "071e2bf02e235060ffc75c7d75904e51dd25885e7196ce6183f0c511f94d6ee2",
    ("16x16", 256, 256, 256, False, None, None):
        "27d7c2c9d1f20f04ba7c206d1934933bbc63890c08d13396df1dc77c67f8c1f3",
    ("16x16", 512, 512, 512, True, None, None):
        "fc0aaca08638c7982c173f767bcc0685d71c25c498b81172dc3892b4f79aca85",
    ("16x16", 512, 512, 512, False, None, None):
        "6e9d76310af462252ca2f8c3a6d2dfa492e691819dbea552869b079f4de8c0d1",
    ("16x16", 1000, 1000, 40, True, None, None):
        "1443137e2da7f511da994a3fe9d1069e17166d6301c48f98f02a20c44b143427",
    ("16x16", 1000, 1000, 40, False, None, None):
        "74b250db82514c906ae69cc2989096cca253353fe92dd72ee20eed065a7e3ccf",
    ("32x32", 100, 300, 200, True, None, None):
        "2e1d8b9a8166554c27c2a83883a1b83e544a0b3349589860c71f8b1e473803d6",
    ("32x32", 100, 300, 200, False, None, None):
        "e0369e337953f923bdc643b99b61386ebdfc78c22a31086304e0e406f77790f0",
    ("4x4", 1, 7, 9, True, None, None):
        "accc3a4c9c1e7271c9b5cd3008eb5b29fc339308dab005078fa236ed5989a8ef",
    ("4x4", 1, 7, 9, False, None, None):
        "be37e1c7a863a33ca67794e87506d72d4faddf3fc0a92c1cd6880ed89047c92a",
    ("4x4", 7, 9, 384, True, None, None):
        "0fde002c8a6216410a8369d5e355abca028c8fa7bd56c4e9e0286435617dae25",
    ("4x4", 7, 9, 384, False, None, None):
        "2372dc0afe4a3197a525c50ca714dfa6433b68a539916f55368f61154bd94325",
    ("4x4", 9, 8, 33, True, None, None):
        "80b8481b746a017803dc218f3517399d3d82d3227887bfd9eecf6c87dca1c9e6",
    ("4x4", 9, 8, 33, False, None, None):
        "534020dcd6b5c49294ead89ecf4acc01cc01047eb22a71587539d458eaf5422e",
    ("4x4", 32, 384, 384, True, None, None):
        "8cb004a1e014aeee0684a92e1b63287928231ad15b5e0b22f967ef19afb2c6a0",
    ("4x4", 32, 384, 384, False, None, None):
        "df2a15bc586be55a80f8d443ba6b3ca9334a7a861824a4081da1f4b8ba45e61c",
    ("4x4", 33, 384, 8, True, None, None):
        "e6ceb5d894910542cf4073fb97f0fe8d567d805a9cb293e47ef8587899ffb347",
    ("4x4", 33, 384, 8, False, None, None):
        "090faade8a45d214e26f8a09580cb107fa3f1b10b3385f977d7856fa6e9fbad5",
    ("4x4", 384, 33, 7, True, None, None):
        "175526800c5e9bc120ccff514d95b446b4d755b19d986b9d874284f62a83f3ed",
    ("4x4", 384, 33, 7, False, None, None):
        "5d63a19cb6539dca39cc32611d27180678e347fdd6cf4cd5cf270ea5a275327b",
    ("4x8s", 40, 30, 70, True, None, None):
        "95fd1aac142801ae692f7943568048026d87fb230ee24a9b948479299fba3f84",
    ("4x8s", 40, 30, 70, False, None, None):
        "b1bec6a348a8705d8eb16222d95e851fe412bd8422e8174917443948a05b1d0c",
    ("8x4", 40, 50, 30, True, None, None):
        "dbaa157fbeb4e3b9b14c350b1bba6fbfaf48ca0bcc374889d0914dfa4e109f1a",
    ("8x4", 40, 50, 30, False, None, None):
        "75f89e88eb7344515121b6cf88389062eaa44f6a1924d5910e731725aa51e4b6",
    ("8x8", 1, 1, 1, True, None, None):
        "e060e8039bb80bbaa1cb3ed3184b685fcf7be7fdbec237070185b10e1164d651",
    ("8x8", 1, 1, 1, False, None, None):
        "2edaa838dd1b1da8df2ea170fc263c42e949d54ac7c6ae72d105d0900463cf70",
    ("8x8", 1, 384, 9, True, None, None):
        "74e228cd801d95df1f8ea67a3d0e2d6a71408195f831ceb8b96a05f1c1a6b619",
    ("8x8", 1, 384, 9, False, None, None):
        "5dba0a375238aa01d77d098b0d1b04f0ea3e02289ed555b231e35ff85403dbda",
    ("8x8", 7, 33, 384, True, None, None):
        "77ca63fd589cb21659b0e0ac859bfbc52ffb0e6d33a8d5500287cfb860f0f69a",
    ("8x8", 7, 33, 384, False, None, None):
        "975df1a2ab0ad0b4fa0a3c43693d7fbb2cd5735fa8ff2a64a091f2216e00440c",
    ("8x8", 8, 1, 1, True, None, None):
        "441ef424aaa89eb8b312003131828da2e2a223b499032344664f797002ba1e23",
    ("8x8", 8, 1, 1, False, None, None):
        "54b482cd970887155f964de2035da5f5651f2f83cc52a3f06097489df016a4e1",
    ("8x8", 9, 384, 33, True, None, None):
        "915e91dfb83435d632c58d598e111ba1b83aea55d4cbd54039a59400310d0f5f",
    ("8x8", 9, 384, 33, False, None, None):
        "3d8143397505546ac14f6696432ec34299990f2956d46181a035e0ffe75188f9",
    ("8x8", 32, 384, 384, True, None, None):
        "3972cd32d18e77c3f04862d278af008844ddeaf929a877b3783522abd6ccb78b",
    ("8x8", 32, 384, 384, False, None, None):
        "c1517d3078ef40e3450a2f6dba6b75740ec81b83a66d3996b334b331f8e000f3",
    ("8x8", 32, 384, 1536, True, None, None):
        "93e461c0b8b849d2d27a9474f1b1e89291a63cabfacea0f1ae95f7b580bc915d",
    ("8x8", 32, 384, 1536, False, None, None):
        "c8cc1d8f77e7238ce19483b904cec445c05b911c9148b72097fbeea4cd3c5985",
    ("8x8", 32, 1536, 384, True, None, None):
        "cc5c3132966e56dc68fd4dd9c881814c3f3e8452c2c37fe160faa8051c95fc73",
    ("8x8", 32, 1536, 384, False, None, None):
        "6f77d1e3b24fc7085cfe97bf437eab47211a77cc5ec253c1e5d480ae850a7639",
    ("8x8", 33, 9, 8, True, None, None):
        "45576d9ad73892f0ea959b582ddd34ecf4ded311ca312ebb14e4c8e1450001f2",
    ("8x8", 33, 9, 8, False, None, None):
        "d612007a783f6c8b970ee3a3b86655829ac27adf36ebe36dd3f1663473445360",
    ("8x8", 64, 64, 64, True, None, None):
        "f8b22a8bd252b9c71bbc2a23d8914e5df1755ca84ea9b7ee741839946ce26d9e",
    ("8x8", 64, 64, 64, False, None, None):
        "c3ffd38b2c65667dc90bc2b132ca57b4eb038c73e1e987809f5d4cf0028fd3af",
    ("8x8", 64, 3000, 24, True, None, None):
        "e407eb4a7b455f78a4434bf9750e9d07af229f07e8a5adbc35812f4c9f3eda17",
    ("8x8", 64, 3000, 24, False, None, None):
        "d0e961967ce959a47c887e76bd5796bbe4a1f8cb6effee593c5c1f2b6866e62d",
    ("8x8", 99, 108, 6, True, None, None):
        "7f762913943658e797943db561ce2b23efcf1001201f8dac012b455d20d8c864",
    ("8x8", 99, 108, 6, False, None, None):
        "50cb4cc815e81ccf53fa2e26c1820012fc9acb0d1b8e3c5a997b412c3264f7c1",
    ("8x8", 128, 128, 128, True, None, None):
        "f5a9deccf58bd6e0465424ea8bb60984b2abf424cdefbc0ce6c0f5238ffd6984",
    ("8x8", 128, 128, 128, False, None, None):
        "4973fed456d9c1e5fa618c698917044d39db7c5df2996d908b1a82eb57d23b5d",
    ("8x8", 128, 384, 384, True, None, None):
        "a29573a13c9ad6c8a7846efb508ec9a45c6a4f7413f333bf433cf8f4b063f6bb",
    ("8x8", 128, 384, 384, False, None, None):
        "55a671b5b82469e5096575deda7bd965e5ba16d9b7ee9275ac2c14b43d6fed21",
    ("8x8", 130, 36, 37, True, None, None):
        "2e45c17640d88c0a871af09227411984be6e25e432a5b018dcc41794b09b4e69",
    ("8x8", 130, 36, 37, False, None, None):
        "418eaef8a9970f467434523a7f61eda72124e566216874d6c36de127ee24080a",
    ("8x8", 256, 256, 256, True, None, None):
        "972cf98984008048fc7d59ba0518d0a6ed6b8c3883677a2e5cfd9fb2a91ad6f9",
    ("8x8", 256, 256, 256, False, None, None):
        "ae8c051c36b1b8cfbb7a8f01d2a3e2ff4d16fe4f9b68e6272b722c3e30164af0",
    ("8x8", 384, 8, 7, True, None, None):
        "1d4a7bd7e45c1e75835855688e784cc4920bcb960e57b45d00da8bd36dd8f97a",
    ("8x8", 384, 8, 7, False, None, None):
        "40a6e8706d2d9770089c8bea44c0d3d02b2bbc37eb2768d96ed9fa5432efd433",
    ("8x8", 512, 512, 512, True, None, None):
        "63ebd310d73bcb01d45b190436420dcda4ce6c031e5d92ad9f823e94f11c1910",
    ("8x8", 512, 512, 512, False, None, None):
        "3077f3604ecbcce29be1f30ff9152e4c29d575cba2e810a71c5ec7fced5d8828",
    ("8x8", 513, 40, 40, True, None, None):
        "02433f3a28b04a2aa4036220132e543b43d201e3ca14e03b45553c48edf33d62",
    ("8x8", 513, 40, 40, False, None, None):
        "0ed165e277bef34226dc89087badbd3685fbf2ba919f3724ae4a4368c74f34d6",
    ("8x8", 1024, 25, 17, True, None, None):
        "0650bc3fb52d073eb38b1f02a430b60571730e9573b5a68258ffa5831f7decd6",
    ("8x8", 1024, 25, 17, False, None, None):
        "d9d437f8fa6b2654629c51284562c1b5c52879fccab416c03ecb3b3cec9b2544",
    ("8x8", 2000, 16, 16, True, None, None):
        "e4d9db776e48dbd836a02670537e79fd0295a16e6b46e1a75d42cac7b2f06955",
    ("8x8", 2000, 16, 16, False, None, None):
        "0aa07b0568e48c8ab4bbfdd8314df6e9451cd1d5339219cd41da1e364b40ef9a",
    ("8x8", 5000, 64, 8, True, None, None):
        "02cff8a6bf39a73f3ba9cf1fd01b71c4642b5a1ede5503a38e07871bef7f5a25",
    ("8x8", 5000, 64, 8, False, None, None):
        "aaad214984f6e17450d30dd3db66a49d2e013f7a2dcb3eb6be3488fbc5ba4473",
    ("bus128", 77, 200, 50, True, None, None):
        "186974164bd4de657afefdde03b0f0c4ead2c664685f1e004214c0b475d9c3f1",
    ("bus128", 77, 200, 50, False, None, None):
        "44709ae6e409854ad83c8286c9d186be77f94801be6b972a4f6509bcf87fd246",
    ("bus32", 77, 200, 50, True, None, None):
        "3f643d8dbe6fe0a2fdb0e0f6fad37540a08afbbf7b336018953f67087fcecf15",
    ("bus32", 77, 200, 50, False, None, None):
        "44709ae6e409854ad83c8286c9d186be77f94801be6b972a4f6509bcf87fd246",
    ("fifo1", 70, 90, 30, True, None, None):
        "25b8c08605342527bd76e26c531edc947669d044ce35416c34151b05e80152f6",
    ("fifo1", 70, 90, 30, False, None, None):
        "58a43f9ba0ed86153425703d3cd98a5012b27b3fc0327907b584c25ef1b1fec2",
    ("fifo4", 300, 100, 90, True, None, None):
        "ac79f3dde8be2e91eaf48fe6189ede3e3d38d7aeec3c81038a49e08f168028bc",
    ("fifo4", 300, 100, 90, False, None, None):
        "38076d2262725ed3bd79201057e7155e2906deada2f296169705be792925f4f7",
    ("tiny4", 33, 384, 9, True, None, None):
        "2e0853204bc1525c66ebd22379985cecae153aec1727bd65201e2cd30be5a7f0",
    ("tiny4", 33, 384, 9, False, None, None):
        "4e62d50bf14542c1b119be59cb52e42953c03296791b49a42877d36009d19e1a",
    ("tiny4", 45, 4, 61, True, None, None):
        "a22cc8d157da01b74fe3452d21be6f9b2e4fa8ec96ce9aac390e5d536fcd8341",
    ("tiny4", 45, 4, 61, False, None, None):
        "4c7c2ba3aab184866b31f73caf23414e1e71a13ec11412cdb2a7ddef8f66d184",
    ("tiny4", 90, 112, 24, True, None, None):
        "abb1f511aad7b38bfe2b5e99ad5eab018c82ee2af40521825041c7b70abca357",
    ("tiny4", 90, 112, 24, False, None, None):
        "86ecebfbb888e1989678c7f3184d4270d8e8e4dd40962a15b8ef8dabb824ac4a",
    ("tiny4", 200, 200, 30, True, None, None):
        "0205f787db0dee7476117b600dad7c7a7eca98bd455806ca494372b17cf27dec",
    ("tiny4", 200, 200, 30, False, None, None):
        "b6f0e8c131ae075614d3932ad24b6aa7af794ba05d34896a15f04748575dfd54",
    ("tiny8", 3, 500, 3, True, None, None):
        "274b1eeb6e3a3db4b4fe8108439b87f21f11ddf1ea848c25466fb70d97015577",
    ("tiny8", 3, 500, 3, False, None, None):
        "9b82f4ae74465fb680313e994a84afc31f64fda68ae60f33c52d99b9e0794978",
    ("tiny8", 33, 384, 9, True, None, None):
        "7a5fa375cc5597984fad1fef21ab3b9922a8debff2757ae9277d3232e9fac287",
    ("tiny8", 33, 384, 9, False, None, None):
        "533329d8b6e6a9742178132c23c045731d3c0e0734ee6095d50b630b3bf084e5",
    ("tiny8", 384, 7, 1, True, None, None):
        "d2e46bccc3b58bcd93ca24f0fca7a0a4bd1f2be121197b874552f2ec1e0b9524",
    ("tiny8", 384, 7, 1, False, None, None):
        "3020c13d5f95e76be569d64b85d6b6b800e64f4f21119e40e217fca8b2db1a92",
    ("8x8", 100, 200, 50, True, (1000, 2000), (512, 512)):
        "994f8862649cbee2b3bc1055a0098050a4fe51cf88ad519a343ae977f5135179",
    ("8x8", 100, 200, 50, False, (1000, 2000), (512, 512)):
        "7efc61723270e21e8ede76049af570ddac5f334d423aaf0f4eec41517e7b30ab",
    ("8x8", 64, 64, 64, True, (2048, 1024), (0, 256)):
        "980c8ffc6895ec14a748daced1573a62990ce02b581f244e204c7a3aa96667b4",
    ("8x8", 64, 64, 64, False, (2048, 1024), (0, 256)):
        "d5ff607dbca188c45d95a305734faa879128e44dc79911990faf2c8b68b18be2",
    ("4x4", 33, 40, 17, True, (100, 900), (10, 300)):
        "34c8f4d80f5fe6556dc1057051d9e8efdb10b38a47e1ce0a8ce6a395cd732cc2",
    ("4x4", 33, 40, 17, False, (100, 900), (10, 300)):
        "b5ab3f591f01bf345a2693f099dca12a6b90f674ebd8df3eda2749a3e8428f05",
}

#: digests of the FORCED tilings of test_linear, in order
FORCED_DIGESTS = [
    "0b77c68b62483221a75a91189a17f4ccfbbf75926e09f01237574226f75e24cb",
    "078f491740bf2444634100ea63a936d3fe7bc2a1476eef967923c32b20b71a1d",
    "1a14441ff8041c96d6934953b4b868732c3126a646c4da1401ff950e32831e1c",
    "b0d01a9238f6182534dc9ede251b7d7a0285c9ca84430adb478872bf9b70f452",
    "2e7102e3351884512715dd40a918b8466ec4bbd2334014881b7e3fecd7bcda59",
    "ebfa4e3278124849db91e6cb4ce4634b68b20737f5e0242914dabe664497900e",
    "55c564397565b8e7739134fa9908af0d95b731f001ea54e90250881e46de9de1",
    "a595d1a3f011c26aa7dd14c1a9d9300678f45af14eaf52b3865de412765371d4",
    "dd48b5caed6de02ab171b01ecec6daedf745092388225f161f94ab345f13f694",
    "647a0ff3077bb984a62009f53cca9efc099c8c78aa8eed1e88a33c9b8f01b5e2",
    "6ce6217e011eab8c9fd86f23e1079767ca386af8cf60095c86bf40f36e5a553a",
    "37a6740ab2457fdfc8593e4b238fb8c833a423c4cd944f1b21869ca5fa7b4792",
    "edd734a4994c0c0cc45aba4e15d26fb481ce14be050c34e1b7ff497d7ca94307",
]


@pytest.mark.parametrize("case", list(PLANNED), ids=[
    f"{c}-{m}x{k}x{n}-{'db' if db else 'ser'}{'-region' if sr else ''}"
    for c, m, k, n, db, sr, _ in PLANNED])
def test_planned_stream_unchanged(case):
    name, m, k, n, db, sr, ar = case
    config = CONFIGS[name]
    plan = plan_linear(config, m, k, n, double_buffer=db, spad_region=sr, acc_region=ar)
    assert digest(config, plan) == PLANNED[case]


def test_forced_tilings_unchanged():
    got = [digest(c, double_buffered_plan(c, m, k, n, **kw)) for c, m, k, n, kw, _ in FORCED]
    assert got == FORCED_DIGESTS
