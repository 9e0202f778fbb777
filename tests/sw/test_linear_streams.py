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
        "cdf3c023622a4a8577d6c2188ff8df6222ccdddfeba584652f70497440b65a0f",
    ("16x16", 64, 64, 64, False, None, None):
        "27d2ab4a811dda7f08287709581b99bb52908fbb459cff793f065cba78c04b74",
    ("16x16", 128, 128, 128, True, None, None):
        "812c11481ef337eec1398999e87a232b8d5e2b66847623f9dbc29a7c76243b41",
    ("16x16", 128, 128, 128, False, None, None):
        "bff51be07107eeec3597b35fb7d0dd3914c30e47b7dfdf6479852322dc8e985f",
    ("16x16", 256, 256, 256, True, None, None):
        "1e20280207c9948daac63405ebf6d9fcc55ee6756eff274c1325ce60cf06e743",
    ("16x16", 256, 256, 256, False, None, None):
        "27d7c2c9d1f20f04ba7c206d1934933bbc63890c08d13396df1dc77c67f8c1f3",
    ("16x16", 512, 512, 512, True, None, None):
        "5509e609376591def82f3364dadc31f852aed1268bbee95545078bf224a164d5",
    ("16x16", 512, 512, 512, False, None, None):
        "6e9d76310af462252ca2f8c3a6d2dfa492e691819dbea552869b079f4de8c0d1",
    ("16x16", 1000, 1000, 40, True, None, None):
        "29e940c448dab30dce99f486348de4018baf685f0e6cbd975e7e5e588cc721bc",
    ("16x16", 1000, 1000, 40, False, None, None):
        "74b250db82514c906ae69cc2989096cca253353fe92dd72ee20eed065a7e3ccf",
    ("32x32", 100, 300, 200, True, None, None):
        "45c33782fb7e71e72501091f92194d750c5f1549c56fb0abc7929179273f6625",
    ("32x32", 100, 300, 200, False, None, None):
        "e0369e337953f923bdc643b99b61386ebdfc78c22a31086304e0e406f77790f0",
    ("4x4", 1, 7, 9, True, None, None):
        "04b0f7277fa3dfa43231b040d284a50316a9770c4ea6f9414050eead66c089a7",
    ("4x4", 1, 7, 9, False, None, None):
        "be37e1c7a863a33ca67794e87506d72d4faddf3fc0a92c1cd6880ed89047c92a",
    ("4x4", 7, 9, 384, True, None, None):
        "0b621d13773da4d9970cca27fd5ecafec5c2a99e542ffbaac68d0c462834789b",
    ("4x4", 7, 9, 384, False, None, None):
        "2372dc0afe4a3197a525c50ca714dfa6433b68a539916f55368f61154bd94325",
    ("4x4", 9, 8, 33, True, None, None):
        "bbf5b6143744c474cd53ace6ed5f4003a825d686fce419a63c861a0f0a38ad90",
    ("4x4", 9, 8, 33, False, None, None):
        "534020dcd6b5c49294ead89ecf4acc01cc01047eb22a71587539d458eaf5422e",
    ("4x4", 32, 384, 384, True, None, None):
        "f9076f68f54e7f1f0222146df1b29f3129f520be01f5b21ff487e7dd2832017e",
    ("4x4", 32, 384, 384, False, None, None):
        "df2a15bc586be55a80f8d443ba6b3ca9334a7a861824a4081da1f4b8ba45e61c",
    ("4x4", 33, 384, 8, True, None, None):
        "0ce23f602e07ddfde96ab2ae5a9ca0b31e48ca316af056a1c105f70e3fd211a9",
    ("4x4", 33, 384, 8, False, None, None):
        "090faade8a45d214e26f8a09580cb107fa3f1b10b3385f977d7856fa6e9fbad5",
    ("4x4", 384, 33, 7, True, None, None):
        "078a20f66fb923e8343e94c911b8797980730faea6e82e7a81654786986c2235",
    ("4x4", 384, 33, 7, False, None, None):
        "5d63a19cb6539dca39cc32611d27180678e347fdd6cf4cd5cf270ea5a275327b",
    ("4x8s", 40, 30, 70, True, None, None):
        "e8ae2d19ce0c30e2518b30154520397b63590995e968692a7b4acba00f45c0de",
    ("4x8s", 40, 30, 70, False, None, None):
        "b1bec6a348a8705d8eb16222d95e851fe412bd8422e8174917443948a05b1d0c",
    ("8x4", 40, 50, 30, True, None, None):
        "101e4e1c7d38f16ce8ddb6ed3093a5e7926948ef01a62bf487563dfdc9be0bc2",
    ("8x4", 40, 50, 30, False, None, None):
        "75f89e88eb7344515121b6cf88389062eaa44f6a1924d5910e731725aa51e4b6",
    ("8x8", 1, 1, 1, True, None, None):
        "9071c35cdbf803644647553500be90f769403f920fc1288070fd5e93c8961199",
    ("8x8", 1, 1, 1, False, None, None):
        "2edaa838dd1b1da8df2ea170fc263c42e949d54ac7c6ae72d105d0900463cf70",
    ("8x8", 1, 384, 9, True, None, None):
        "dfde672a20e07b06667142d94bfe6e775397a06af2add9d3e7c4002b488bf696",
    ("8x8", 1, 384, 9, False, None, None):
        "5dba0a375238aa01d77d098b0d1b04f0ea3e02289ed555b231e35ff85403dbda",
    ("8x8", 7, 33, 384, True, None, None):
        "85389756fa1614b92dd5c545be3099cc84ae894b0e5ace88c4ec361d803325a1",
    ("8x8", 7, 33, 384, False, None, None):
        "975df1a2ab0ad0b4fa0a3c43693d7fbb2cd5735fa8ff2a64a091f2216e00440c",
    ("8x8", 8, 1, 1, True, None, None):
        "f781985e70ace1ba2e8e23061ca90d74614267d91d307456b0c8c5d9700e05ed",
    ("8x8", 8, 1, 1, False, None, None):
        "54b482cd970887155f964de2035da5f5651f2f83cc52a3f06097489df016a4e1",
    ("8x8", 9, 384, 33, True, None, None):
        "2c3f01fed5c3c16672ab6b8225f83a3906163191233889fae747bafd20f1b31d",
    ("8x8", 9, 384, 33, False, None, None):
        "3d8143397505546ac14f6696432ec34299990f2956d46181a035e0ffe75188f9",
    ("8x8", 32, 384, 384, True, None, None):
        "2d831a834edff7a795af27d1fb167127842a853d0d3bd55e0a71dab005af022c",
    ("8x8", 32, 384, 384, False, None, None):
        "c1517d3078ef40e3450a2f6dba6b75740ec81b83a66d3996b334b331f8e000f3",
    ("8x8", 32, 384, 1536, True, None, None):
        "5e2163affc4042bcb43523899c7c81c7238918ff0153048fa1ac31f94b9cb1eb",
    ("8x8", 32, 384, 1536, False, None, None):
        "c8cc1d8f77e7238ce19483b904cec445c05b911c9148b72097fbeea4cd3c5985",
    ("8x8", 32, 1536, 384, True, None, None):
        "269c0ac61f096e06f84ec26c17b77f40392d82d2e2aba26961d23802ba2478c3",
    ("8x8", 32, 1536, 384, False, None, None):
        "6f77d1e3b24fc7085cfe97bf437eab47211a77cc5ec253c1e5d480ae850a7639",
    ("8x8", 33, 9, 8, True, None, None):
        "52ef10dec755e38754b349b47b63ea3d1f849ae97152e9eb92ea29ca8fa3a403",
    ("8x8", 33, 9, 8, False, None, None):
        "d612007a783f6c8b970ee3a3b86655829ac27adf36ebe36dd3f1663473445360",
    ("8x8", 64, 64, 64, True, None, None):
        "d41ae1bda4bdb14dd972a571cae8553d4a2cba01339ded75f836e5545c3f60f4",
    ("8x8", 64, 64, 64, False, None, None):
        "c3ffd38b2c65667dc90bc2b132ca57b4eb038c73e1e987809f5d4cf0028fd3af",
    ("8x8", 64, 3000, 24, True, None, None):
        "98b0c65ebf15c06022fe1c0fce3af58b517067d94be24272d230c16921ee7831",
    ("8x8", 64, 3000, 24, False, None, None):
        "d0e961967ce959a47c887e76bd5796bbe4a1f8cb6effee593c5c1f2b6866e62d",
    ("8x8", 99, 108, 6, True, None, None):
        "2e28ed35fa86515e556e1ac72ce09ec9f85cb4f0a3d5646ab0ed671421340d2a",
    ("8x8", 99, 108, 6, False, None, None):
        "50cb4cc815e81ccf53fa2e26c1820012fc9acb0d1b8e3c5a997b412c3264f7c1",
    ("8x8", 128, 128, 128, True, None, None):
        "bab4fee08c1faa676e2be1acf05c7f843d738a09456e45d00a697d158523e0eb",
    ("8x8", 128, 128, 128, False, None, None):
        "4973fed456d9c1e5fa618c698917044d39db7c5df2996d908b1a82eb57d23b5d",
    ("8x8", 128, 384, 384, True, None, None):
        "406eabff2df8199926ca408ec47ab6464b3755e3fb53020cb7ade254035d2bdb",
    ("8x8", 128, 384, 384, False, None, None):
        "55a671b5b82469e5096575deda7bd965e5ba16d9b7ee9275ac2c14b43d6fed21",
    ("8x8", 130, 36, 37, True, None, None):
        "06b3b2b9c96fa41c565a531e9dc60b6cdaa76ae522682201ea2f5d1e3886bcf5",
    ("8x8", 130, 36, 37, False, None, None):
        "418eaef8a9970f467434523a7f61eda72124e566216874d6c36de127ee24080a",
    ("8x8", 256, 256, 256, True, None, None):
        "e1d5bbb17b3a6c377709b8be68730530e7140a3b87e1ac83461776de55136251",
    ("8x8", 256, 256, 256, False, None, None):
        "ae8c051c36b1b8cfbb7a8f01d2a3e2ff4d16fe4f9b68e6272b722c3e30164af0",
    ("8x8", 384, 8, 7, True, None, None):
        "048f4b079d14e5d576ddc0abcdf807be8d491018206df8c676c859108f0e17e8",
    ("8x8", 384, 8, 7, False, None, None):
        "40a6e8706d2d9770089c8bea44c0d3d02b2bbc37eb2768d96ed9fa5432efd433",
    ("8x8", 512, 512, 512, True, None, None):
        "69b736d67ced106de5a9fb562d1fe88a264cb8ff0ba81dd97239bba909806dd1",
    ("8x8", 512, 512, 512, False, None, None):
        "3077f3604ecbcce29be1f30ff9152e4c29d575cba2e810a71c5ec7fced5d8828",
    ("8x8", 513, 40, 40, True, None, None):
        "390c9f55c8cb84021b9788b1cda96f3705a4100c9b35fd0c964e2e2db7fad1d2",
    ("8x8", 513, 40, 40, False, None, None):
        "0ed165e277bef34226dc89087badbd3685fbf2ba919f3724ae4a4368c74f34d6",
    ("8x8", 1024, 25, 17, True, None, None):
        "2f55a7af128f4607be1dc2d45d47079f77e53c06f09f7ba7c6439af6dffc2c33",
    ("8x8", 1024, 25, 17, False, None, None):
        "d9d437f8fa6b2654629c51284562c1b5c52879fccab416c03ecb3b3cec9b2544",
    ("8x8", 2000, 16, 16, True, None, None):
        "396c4697acb16d31290d6fccb272ab24d2889944df246ab8eb197c77c29cb6bd",
    ("8x8", 2000, 16, 16, False, None, None):
        "0aa07b0568e48c8ab4bbfdd8314df6e9451cd1d5339219cd41da1e364b40ef9a",
    ("8x8", 5000, 64, 8, True, None, None):
        "8a91d4fce04a5896be6d66932162eb74365aabfbd159b26307e760f010c05996",
    ("8x8", 5000, 64, 8, False, None, None):
        "aaad214984f6e17450d30dd3db66a49d2e013f7a2dcb3eb6be3488fbc5ba4473",
    ("bus128", 77, 200, 50, True, None, None):
        "8dba2f56c31a1499ec5859a7d750261b787bc0f8872e3e70a6f35f48c702bfee",
    ("bus128", 77, 200, 50, False, None, None):
        "44709ae6e409854ad83c8286c9d186be77f94801be6b972a4f6509bcf87fd246",
    ("bus32", 77, 200, 50, True, None, None):
        "038896ea0324689adcdd98454c1c3da72ab1b63944774b13ad0e53f1abd21e89",
    ("bus32", 77, 200, 50, False, None, None):
        "44709ae6e409854ad83c8286c9d186be77f94801be6b972a4f6509bcf87fd246",
    ("fifo1", 70, 90, 30, True, None, None):
        "cbbea9b1d0cfb286380ce3997d2145f467b6d8e45dbc83d4291aca65e349b1a3",
    ("fifo1", 70, 90, 30, False, None, None):
        "58a43f9ba0ed86153425703d3cd98a5012b27b3fc0327907b584c25ef1b1fec2",
    ("fifo4", 300, 100, 90, True, None, None):
        "651d05d2b1b3bd9f875b6c4b95b33572e0cbe0138ac59f59e239bb215ae696b4",
    ("fifo4", 300, 100, 90, False, None, None):
        "38076d2262725ed3bd79201057e7155e2906deada2f296169705be792925f4f7",
    ("tiny4", 33, 384, 9, True, None, None):
        "5e12e080639eb2bf3aabd4ba549348f186b32049a6d9dea2aaeabf8c1e898485",
    ("tiny4", 33, 384, 9, False, None, None):
        "4e62d50bf14542c1b119be59cb52e42953c03296791b49a42877d36009d19e1a",
    ("tiny4", 45, 4, 61, True, None, None):
        "6dea25914f77feea16223cfda618de167c50b75c21cdb8bbe23ff2fd973185ea",
    ("tiny4", 45, 4, 61, False, None, None):
        "4c7c2ba3aab184866b31f73caf23414e1e71a13ec11412cdb2a7ddef8f66d184",
    ("tiny4", 90, 112, 24, True, None, None):
        "f94d28ec94471c621797fcd8de367fed4b13ff83379a208f85f3a2b5aad1ff82",
    ("tiny4", 90, 112, 24, False, None, None):
        "86ecebfbb888e1989678c7f3184d4270d8e8e4dd40962a15b8ef8dabb824ac4a",
    ("tiny4", 200, 200, 30, True, None, None):
        "f81f97554bf13cf746abf9dea260cc4a362ab015c21269959c09a68ddcd245f7",
    ("tiny4", 200, 200, 30, False, None, None):
        "b6f0e8c131ae075614d3932ad24b6aa7af794ba05d34896a15f04748575dfd54",
    ("tiny8", 3, 500, 3, True, None, None):
        "7bed13614ad42016ea1e60a075b22cb635a932923518086cb67dc56a6aa2cf70",
    ("tiny8", 3, 500, 3, False, None, None):
        "9b82f4ae74465fb680313e994a84afc31f64fda68ae60f33c52d99b9e0794978",
    ("tiny8", 33, 384, 9, True, None, None):
        "0bf45270f1eb5bc1da69cfab13cc9d08888bf15f4a870326016a519acebe2275",
    ("tiny8", 33, 384, 9, False, None, None):
        "533329d8b6e6a9742178132c23c045731d3c0e0734ee6095d50b630b3bf084e5",
    ("tiny8", 384, 7, 1, True, None, None):
        "59450844af95d3f5cce0ec5da29b102df62cba1e12827af901976b6773f109f2",
    ("tiny8", 384, 7, 1, False, None, None):
        "3020c13d5f95e76be569d64b85d6b6b800e64f4f21119e40e217fca8b2db1a92",
    ("8x8", 100, 200, 50, True, (1000, 2000), (512, 512)):
        "c97ea7fcd05da37cac5ce22dd4957c80bb56ade2850915998e3d94b7318104c0",
    ("8x8", 100, 200, 50, False, (1000, 2000), (512, 512)):
        "7efc61723270e21e8ede76049af570ddac5f334d423aaf0f4eec41517e7b30ab",
    ("8x8", 64, 64, 64, True, (2048, 1024), (0, 256)):
        "9ebfacfe56a739b7bef73ca26987e3fdc12270e9eebad5ea45bb5f8c4367726d",
    ("8x8", 64, 64, 64, False, (2048, 1024), (0, 256)):
        "d5ff607dbca188c45d95a305734faa879128e44dc79911990faf2c8b68b18be2",
    ("4x4", 33, 40, 17, True, (100, 900), (10, 300)):
        "bd253ab1594d1ac74f2e57788f864cda50a0f9da9e0ad9660b5da9b99105e05a",
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
    "1539ec164cc195fc3485ac39926cd436d4605e3515847bc169b893cbe3ccf4ba",
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
