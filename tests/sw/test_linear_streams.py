"""The linear kernel's command streams are byte-identical to those of the planner before it
was split into modules and typed operations (commit 844ebba): SHA-256 of each plan, its encoded
commands (wrapping semaphore targets, odd addresses, ReLU) and its DRAM traffic, for the
planned shapes of ``test_linear``, larger and odd shapes on nine configurations, regions, both
the double-buffered and the serialized plan, and the hand-picked tilings of ``FORCED``."""

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
    h = hashlib.sha256(repr(plan).encode())
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
        "f711587a31569fd3902c25ad29a0546d6576b42fd0117733ff316e7fe231e79a",
    ("16x16", 64, 64, 64, False, None, None):
        "27d2ab4a811dda7f08287709581b99bb52908fbb459cff793f065cba78c04b74",
    ("16x16", 128, 128, 128, True, None, None):
        "96b4d8c92709d8b5981ce610239490d5e42b1fe4c3ab0408b999d3081202e885",
    ("16x16", 128, 128, 128, False, None, None):
        "bff51be07107eeec3597b35fb7d0dd3914c30e47b7dfdf6479852322dc8e985f",
    ("16x16", 256, 256, 256, True, None, None):
        "d1f89a5b4c54d7a4704971cf7707776594601c2b098cc5726c3c1a1c0cdb4cdf",
    ("16x16", 256, 256, 256, False, None, None):
        "27d7c2c9d1f20f04ba7c206d1934933bbc63890c08d13396df1dc77c67f8c1f3",
    ("16x16", 512, 512, 512, True, None, None):
        "ce368fcd5301a7bc2d229d41b815c609dd0d26150d4aeda5edd783e17eb3ca46",
    ("16x16", 512, 512, 512, False, None, None):
        "6e9d76310af462252ca2f8c3a6d2dfa492e691819dbea552869b079f4de8c0d1",
    ("16x16", 1000, 1000, 40, True, None, None):
        "ffe40784a93dc6f137a1d646ee3315993a55749fe71ff2fc34c80009812b18b5",
    ("16x16", 1000, 1000, 40, False, None, None):
        "74b250db82514c906ae69cc2989096cca253353fe92dd72ee20eed065a7e3ccf",
    ("32x32", 100, 300, 200, True, None, None):
        "578e60ad2a5d64ef17c337e2ed9130738b01688ebd6356d93cd5fafb4d1d40ef",
    ("32x32", 100, 300, 200, False, None, None):
        "e0369e337953f923bdc643b99b61386ebdfc78c22a31086304e0e406f77790f0",
    ("4x4", 1, 7, 9, True, None, None):
        "b9ec9a5aea485461ad6887a0a2e36a54d5d929475e4dce48dd61cea615910436",
    ("4x4", 1, 7, 9, False, None, None):
        "be37e1c7a863a33ca67794e87506d72d4faddf3fc0a92c1cd6880ed89047c92a",
    ("4x4", 7, 9, 384, True, None, None):
        "81d50874083708044333cfdb6a3fada8bf9d52ae80ec502b8d0519ab09fedd2a",
    ("4x4", 7, 9, 384, False, None, None):
        "2372dc0afe4a3197a525c50ca714dfa6433b68a539916f55368f61154bd94325",
    ("4x4", 9, 8, 33, True, None, None):
        "bf3c863fb62f8c0d24501352d7114324eece7a06f81026cb01ae05f4f79c3f7e",
    ("4x4", 9, 8, 33, False, None, None):
        "534020dcd6b5c49294ead89ecf4acc01cc01047eb22a71587539d458eaf5422e",
    ("4x4", 32, 384, 384, True, None, None):
        "b2385cc7805be9bdd1721e06ab8515f4be5d14d06c42caa002701075ee3e5a64",
    ("4x4", 32, 384, 384, False, None, None):
        "df2a15bc586be55a80f8d443ba6b3ca9334a7a861824a4081da1f4b8ba45e61c",
    ("4x4", 33, 384, 8, True, None, None):
        "b9a91f921bfdb845152a5c278cad4d0bf10a19fba08d7a08cb5f1609dcf3e2f4",
    ("4x4", 33, 384, 8, False, None, None):
        "090faade8a45d214e26f8a09580cb107fa3f1b10b3385f977d7856fa6e9fbad5",
    ("4x4", 384, 33, 7, True, None, None):
        "ada076a3518a702630261b73d2338b2059f92d50f76ca7e3de9bb3205934f850",
    ("4x4", 384, 33, 7, False, None, None):
        "5d63a19cb6539dca39cc32611d27180678e347fdd6cf4cd5cf270ea5a275327b",
    ("4x8s", 40, 30, 70, True, None, None):
        "584d22482b770b98e25df50c713b2ce6d43d78ad9ce88ec87b9bf77cf47a1d23",
    ("4x8s", 40, 30, 70, False, None, None):
        "b1bec6a348a8705d8eb16222d95e851fe412bd8422e8174917443948a05b1d0c",
    ("8x4", 40, 50, 30, True, None, None):
        "bbdf1476482c6073425294477ea6756866dcc42ac68ea580b2a85cba04767a40",
    ("8x4", 40, 50, 30, False, None, None):
        "75f89e88eb7344515121b6cf88389062eaa44f6a1924d5910e731725aa51e4b6",
    ("8x8", 1, 1, 1, True, None, None):
        "d835951026c144457bdfd5093bb792930e57aa1c972cce7a42d5530c1772725f",
    ("8x8", 1, 1, 1, False, None, None):
        "2edaa838dd1b1da8df2ea170fc263c42e949d54ac7c6ae72d105d0900463cf70",
    ("8x8", 1, 384, 9, True, None, None):
        "b7223fc4a07a3e07b77837368cd01b51fae05e85cd1b64508e84ddde9b911aef",
    ("8x8", 1, 384, 9, False, None, None):
        "5dba0a375238aa01d77d098b0d1b04f0ea3e02289ed555b231e35ff85403dbda",
    ("8x8", 7, 33, 384, True, None, None):
        "bf728c74493e597a931fba68eab884d0f3124e9e74aa831c0fcc574c97e36c06",
    ("8x8", 7, 33, 384, False, None, None):
        "975df1a2ab0ad0b4fa0a3c43693d7fbb2cd5735fa8ff2a64a091f2216e00440c",
    ("8x8", 8, 1, 1, True, None, None):
        "f997fbfa5153f247a6c1ffa64c6eca2b047c6a283838ebeca3130df733a10a97",
    ("8x8", 8, 1, 1, False, None, None):
        "54b482cd970887155f964de2035da5f5651f2f83cc52a3f06097489df016a4e1",
    ("8x8", 9, 384, 33, True, None, None):
        "5ffcd78740fced3f0b6334fc22ee161f2277c4bba47271d67789e8ed618c4908",
    ("8x8", 9, 384, 33, False, None, None):
        "3d8143397505546ac14f6696432ec34299990f2956d46181a035e0ffe75188f9",
    ("8x8", 32, 384, 384, True, None, None):
        "e7b4e67ffb6cd97aa8deebd3b33401da15f88d382ff997df5c0315b4414079ea",
    ("8x8", 32, 384, 384, False, None, None):
        "c1517d3078ef40e3450a2f6dba6b75740ec81b83a66d3996b334b331f8e000f3",
    ("8x8", 32, 384, 1536, True, None, None):
        "4dfe31946d63621f21cdb02de43a69ffb5b479865d66bf008bf7e6441c2af9d7",
    ("8x8", 32, 384, 1536, False, None, None):
        "c8cc1d8f77e7238ce19483b904cec445c05b911c9148b72097fbeea4cd3c5985",
    ("8x8", 32, 1536, 384, True, None, None):
        "33e06249c35b3425625c2c6d23755af9d4c54a863b4784ae22b98e3f15b57f6d",
    ("8x8", 32, 1536, 384, False, None, None):
        "6f77d1e3b24fc7085cfe97bf437eab47211a77cc5ec253c1e5d480ae850a7639",
    ("8x8", 33, 9, 8, True, None, None):
        "d1003e884291f72f23279d6fef145d388fc1bab9c44f6a91a161b7cb841d3636",
    ("8x8", 33, 9, 8, False, None, None):
        "d612007a783f6c8b970ee3a3b86655829ac27adf36ebe36dd3f1663473445360",
    ("8x8", 64, 64, 64, True, None, None):
        "e8fd6b016fab2b288e9872c0fc474a2ab4f4ae8bfff03789db947e90b3d284b0",
    ("8x8", 64, 64, 64, False, None, None):
        "c3ffd38b2c65667dc90bc2b132ca57b4eb038c73e1e987809f5d4cf0028fd3af",
    ("8x8", 64, 3000, 24, True, None, None):
        "da4dae2de45b8117e7b4edfe2faa4304861ac05392117c3d1fb1acfc0fd7a239",
    ("8x8", 64, 3000, 24, False, None, None):
        "d0e961967ce959a47c887e76bd5796bbe4a1f8cb6effee593c5c1f2b6866e62d",
    ("8x8", 99, 108, 6, True, None, None):
        "358434ef973b7f7dd23071d66c791d4cb81e5dffbbcab37e2e4905628346dba8",
    ("8x8", 99, 108, 6, False, None, None):
        "50cb4cc815e81ccf53fa2e26c1820012fc9acb0d1b8e3c5a997b412c3264f7c1",
    ("8x8", 128, 128, 128, True, None, None):
        "901c2596c056b986bd5248280541407405f9c350d6cfd871b12318395f655e75",
    ("8x8", 128, 128, 128, False, None, None):
        "4973fed456d9c1e5fa618c698917044d39db7c5df2996d908b1a82eb57d23b5d",
    ("8x8", 128, 384, 384, True, None, None):
        "9a78193e62f91d9d9d0362021bcdce06cf5c00c8c3966a1f184512c923c9948b",
    ("8x8", 128, 384, 384, False, None, None):
        "55a671b5b82469e5096575deda7bd965e5ba16d9b7ee9275ac2c14b43d6fed21",
    ("8x8", 130, 36, 37, True, None, None):
        "63d2b7cabe478de490a43b614a3809e8d9286fb51f2775305455c6a46d0b826e",
    ("8x8", 130, 36, 37, False, None, None):
        "418eaef8a9970f467434523a7f61eda72124e566216874d6c36de127ee24080a",
    ("8x8", 256, 256, 256, True, None, None):
        "89181b7fb584d4584ac6da6715eb7448a9f9661ab1284473b72d3fad4258e6a8",
    ("8x8", 256, 256, 256, False, None, None):
        "ae8c051c36b1b8cfbb7a8f01d2a3e2ff4d16fe4f9b68e6272b722c3e30164af0",
    ("8x8", 384, 8, 7, True, None, None):
        "d105fdb93143769dcf75902a214786327f6eb96a1b83a3fe9b6a3e26c9bf845e",
    ("8x8", 384, 8, 7, False, None, None):
        "40a6e8706d2d9770089c8bea44c0d3d02b2bbc37eb2768d96ed9fa5432efd433",
    ("8x8", 512, 512, 512, True, None, None):
        "a1c699725908fc22b2e5e4372a6849d0188a89eb2847a6146d9ab29f24b862db",
    ("8x8", 512, 512, 512, False, None, None):
        "3077f3604ecbcce29be1f30ff9152e4c29d575cba2e810a71c5ec7fced5d8828",
    ("8x8", 513, 40, 40, True, None, None):
        "b148919c9bcaa8b5da56f44ecc9217e5a9bef6fca4d8a13435ca87d1a59c08aa",
    ("8x8", 513, 40, 40, False, None, None):
        "0ed165e277bef34226dc89087badbd3685fbf2ba919f3724ae4a4368c74f34d6",
    ("8x8", 1024, 25, 17, True, None, None):
        "19622af38a88413d1269090f91cf365b5c09b364aa07edaf6098b5aa650b07fe",
    ("8x8", 1024, 25, 17, False, None, None):
        "d9d437f8fa6b2654629c51284562c1b5c52879fccab416c03ecb3b3cec9b2544",
    ("8x8", 2000, 16, 16, True, None, None):
        "da72d862774addc7862c1ad9bccbe1a16fa38dc8caef418a62cacdd20b3bd7d2",
    ("8x8", 2000, 16, 16, False, None, None):
        "0aa07b0568e48c8ab4bbfdd8314df6e9451cd1d5339219cd41da1e364b40ef9a",
    ("8x8", 5000, 64, 8, True, None, None):
        "749a3bb258fdac16a9f27e7d2634b4a04a8f2e3ce4743b1c35636505307db084",
    ("8x8", 5000, 64, 8, False, None, None):
        "aaad214984f6e17450d30dd3db66a49d2e013f7a2dcb3eb6be3488fbc5ba4473",
    ("bus128", 77, 200, 50, True, None, None):
        "f90fd426f66835dce4913be0d19dae3696a29dc10d8506bccee212c7c0607bbe",
    ("bus128", 77, 200, 50, False, None, None):
        "44709ae6e409854ad83c8286c9d186be77f94801be6b972a4f6509bcf87fd246",
    ("bus32", 77, 200, 50, True, None, None):
        "8636589b2f87096b524dd5b9cad2e3e269bfc073b69e46604de6cd43770636a3",
    ("bus32", 77, 200, 50, False, None, None):
        "44709ae6e409854ad83c8286c9d186be77f94801be6b972a4f6509bcf87fd246",
    ("fifo1", 70, 90, 30, True, None, None):
        "a45eb34924bf6554ac70f0a90fd19c134b60e9181a1a6ede7d86e8dd4897400b",
    ("fifo1", 70, 90, 30, False, None, None):
        "58a43f9ba0ed86153425703d3cd98a5012b27b3fc0327907b584c25ef1b1fec2",
    ("fifo4", 300, 100, 90, True, None, None):
        "4e599e74677ff0fbfa0b455c816fc9aed363d2f9c9bd6c837c254d90fc757548",
    ("fifo4", 300, 100, 90, False, None, None):
        "38076d2262725ed3bd79201057e7155e2906deada2f296169705be792925f4f7",
    ("tiny4", 33, 384, 9, True, None, None):
        "6653841448a9dfdd0329f5c48c387c3f23eb1c55d7a10b9377ee5d04fc7b9896",
    ("tiny4", 33, 384, 9, False, None, None):
        "4e62d50bf14542c1b119be59cb52e42953c03296791b49a42877d36009d19e1a",
    ("tiny4", 45, 4, 61, True, None, None):
        "b78d47dd3b7f6031aa5526326b197e64d653ebb6124edcc4b0943bb878e8fad8",
    ("tiny4", 45, 4, 61, False, None, None):
        "4c7c2ba3aab184866b31f73caf23414e1e71a13ec11412cdb2a7ddef8f66d184",
    ("tiny4", 90, 112, 24, True, None, None):
        "a8810e5cd22f6000b0831c0972c2d99693b27ca35cd08233f642e6082dde56b8",
    ("tiny4", 90, 112, 24, False, None, None):
        "86ecebfbb888e1989678c7f3184d4270d8e8e4dd40962a15b8ef8dabb824ac4a",
    ("tiny4", 200, 200, 30, True, None, None):
        "0e2e01bf1eeef95fabcff9de9dd549e7c0da1cd10596c0b8b1b9e46c2d8748ac",
    ("tiny4", 200, 200, 30, False, None, None):
        "b6f0e8c131ae075614d3932ad24b6aa7af794ba05d34896a15f04748575dfd54",
    ("tiny8", 3, 500, 3, True, None, None):
        "d77d55ae0da160bed8f919545f9d6adaf0fc5fa4f28fc2f2b0a6edfc3861b4f9",
    ("tiny8", 3, 500, 3, False, None, None):
        "9b82f4ae74465fb680313e994a84afc31f64fda68ae60f33c52d99b9e0794978",
    ("tiny8", 33, 384, 9, True, None, None):
        "fc4e1200a0245e7e77930717b3968686a0026317b700a7cb36081dbb1a970385",
    ("tiny8", 33, 384, 9, False, None, None):
        "533329d8b6e6a9742178132c23c045731d3c0e0734ee6095d50b630b3bf084e5",
    ("tiny8", 384, 7, 1, True, None, None):
        "7cace653b90cf49907371f204c37e367fd5e1243d2a83fe4fa54d287affc2fdb",
    ("tiny8", 384, 7, 1, False, None, None):
        "3020c13d5f95e76be569d64b85d6b6b800e64f4f21119e40e217fca8b2db1a92",
    ("8x8", 100, 200, 50, True, (1000, 2000), (512, 512)):
        "0d2529485bdbf90070e2ee33c6bc53cd494a6f071c918f2dab94e13bd84ab8c6",
    ("8x8", 100, 200, 50, False, (1000, 2000), (512, 512)):
        "7efc61723270e21e8ede76049af570ddac5f334d423aaf0f4eec41517e7b30ab",
    ("8x8", 64, 64, 64, True, (2048, 1024), (0, 256)):
        "de3e0f394c38c18d0e4cdd31c101ea8438db8a99b3ee6f0e021ad1e653541a3a",
    ("8x8", 64, 64, 64, False, (2048, 1024), (0, 256)):
        "d5ff607dbca188c45d95a305734faa879128e44dc79911990faf2c8b68b18be2",
    ("4x4", 33, 40, 17, True, (100, 900), (10, 300)):
        "3ea3b922e9a1e53a608dd12b2ed31976297f0cda78915f12992b19d732b0955b",
    ("4x4", 33, 40, 17, False, (100, 900), (10, 300)):
        "b5ab3f591f01bf345a2693f099dca12a6b90f674ebd8df3eda2749a3e8428f05",
}

#: digests of the FORCED tilings of test_linear, in order
FORCED_DIGESTS = [
    "eb66f7dd75ee263fd7eeea7f50df5029d6ab73e1666132d34b4980d9ff41ee1d",
    "064da37092cff1716c96cc2da841101ea394c15dfc6384c45ac8923caaeac28f",
    "1a14441ff8041c96d6934953b4b868732c3126a646c4da1401ff950e32831e1c",
    "cd922d5d3f99d08f7faa196d28a48f94098d877bdf03ad8dd3d35875df1fb1f7",
    "06802c123dd7f08b86955059c8f95381254a2f7435aaeca5952d8ee0ba6a4940",
    "a987aca9561591412a985e1bd98cdab5f8a75a22601439af61685942a0339a06",
    "056c525a6647e4a48a7beab23b83fadef1389616f58cc689fed55b5b3df55a0e",
    "1539ec164cc195fc3485ac39926cd436d4605e3515847bc169b893cbe3ccf4ba",
    "4f73bf98d2dc1eae78a4cf6ee60ce78c788ac721d7c56ee9fb39184cc280ab05",
    "647a0ff3077bb984a62009f53cca9efc099c8c78aa8eed1e88a33c9b8f01b5e2",
    "a2a701eb0830ca1a28024dc5b2139d723e00b6cf16c14990dbedb3bac15fb184",
    "7acaccd9e37b0caf91cfdbd9eb587d2d1c51de7731cadda7885034f0fc674856",
    "5ad24095d7b245377fe7b8f91f7cccec7afaa07699a106dbc00ae4968315f4d7",
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
