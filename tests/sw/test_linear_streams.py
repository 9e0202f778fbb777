"""The linear kernel's command streams are byte-identical to those of the planner before it
was split into modules and typed operations (commit 844ebba): SHA-256 of each plan, its encoded
commands (wrapping semaphore targets, odd addresses, ReLU) and its DRAM traffic, for the
planned shapes of ``test_linear``, larger and odd shapes on nine configurations, regions, both
the double-buffered and the serialized plan, and the hand-picked tilings of ``FORCED``.

The double-buffered digests were regenerated since, on purpose, for issue 13's pipelined
matrix engine: the planner's MATMUL cost became the back-to-back period
(:func:`sw.kernels.linear.matmul_cycles`) and consecutive K blocks became one MATMUL
(``k_blocks``); and again for the parameter loads: one DRAM row per load (one long burst
instead of a burst per accumulator row) and the parameters of up to eight steps in one load
(``LinearPlan.p_steps``). The serialized plans' streams are unchanged."""

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
    text = text.replace(", p_steps=1", "")         # one parameter load per step
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
        "645262340ef6b8f8bb6cc86afe58ef763bbdd0df3960c4d8bde8ed60ddbe245b",
    ("16x16", 64, 64, 64, False, None, None):
        "27d2ab4a811dda7f08287709581b99bb52908fbb459cff793f065cba78c04b74",
    ("16x16", 128, 128, 128, True, None, None):
        "5ae97e4c1b2d88b11926a2711071c0b598cb776175029eec6aafb5a5d7e6b64a",
    ("16x16", 128, 128, 128, False, None, None):
        "bff51be07107eeec3597b35fb7d0dd3914c30e47b7dfdf6479852322dc8e985f",
    ("16x16", 256, 256, 256, True, None, None):
        "807278102743c2bdd36f531766dc9712eb08d966508da50208f91c650142b5ae",
    ("16x16", 256, 256, 256, False, None, None):
        "27d7c2c9d1f20f04ba7c206d1934933bbc63890c08d13396df1dc77c67f8c1f3",
    ("16x16", 512, 512, 512, True, None, None):
        "30a734a484f162ae2da586b208cac73c0ae3c0dfb9976552b99e0a9cb1bd26ec",
    ("16x16", 512, 512, 512, False, None, None):
        "6e9d76310af462252ca2f8c3a6d2dfa492e691819dbea552869b079f4de8c0d1",
    ("16x16", 1000, 1000, 40, True, None, None):
        "ea2f3f9eaa7528f3d6b4ba6803216bf6a4b53ac27d0ad4dcf6b44609d124886c",
    ("16x16", 1000, 1000, 40, False, None, None):
        "74b250db82514c906ae69cc2989096cca253353fe92dd72ee20eed065a7e3ccf",
    ("32x32", 100, 300, 200, True, None, None):
        "b05955b823e68e9e4519817a51e5e6ccdbc29f48fb134e08a3cb0baf92f81c34",
    ("32x32", 100, 300, 200, False, None, None):
        "e0369e337953f923bdc643b99b61386ebdfc78c22a31086304e0e406f77790f0",
    ("4x4", 1, 7, 9, True, None, None):
        "92b3d514fbb8db17c02aca2b80c2581cf14764aa0edc764272cbe0929cf39225",
    ("4x4", 1, 7, 9, False, None, None):
        "be37e1c7a863a33ca67794e87506d72d4faddf3fc0a92c1cd6880ed89047c92a",
    ("4x4", 7, 9, 384, True, None, None):
        "de6924c178e0402d0a815f82cfe13e1a89a8c1044e1f027738fe2d8681c16931",
    ("4x4", 7, 9, 384, False, None, None):
        "2372dc0afe4a3197a525c50ca714dfa6433b68a539916f55368f61154bd94325",
    ("4x4", 9, 8, 33, True, None, None):
        "6477182641dda2c2129c0e50efaedb503170d958f225cefa9215871098a8d159",
    ("4x4", 9, 8, 33, False, None, None):
        "534020dcd6b5c49294ead89ecf4acc01cc01047eb22a71587539d458eaf5422e",
    ("4x4", 32, 384, 384, True, None, None):
        "4b8a082d01d4f5c6a37095d5a6bd808d5676f93f2b11b2fb719e86e19fea0af5",
    ("4x4", 32, 384, 384, False, None, None):
        "df2a15bc586be55a80f8d443ba6b3ca9334a7a861824a4081da1f4b8ba45e61c",
    ("4x4", 33, 384, 8, True, None, None):
        "26ca3c34c04016e19419888bfb54d814718c90f3b344163be360965fba8cbc1b",
    ("4x4", 33, 384, 8, False, None, None):
        "090faade8a45d214e26f8a09580cb107fa3f1b10b3385f977d7856fa6e9fbad5",
    ("4x4", 384, 33, 7, True, None, None):
        "42230bb016953202d4512248140564bf450b90bc354a888ea8aaf5838055cbcf",
    ("4x4", 384, 33, 7, False, None, None):
        "5d63a19cb6539dca39cc32611d27180678e347fdd6cf4cd5cf270ea5a275327b",
    ("4x8s", 40, 30, 70, True, None, None):
        "49efe74060fc50052cc27da9f70277f90467e8d39a2cab3227faf65e44564011",
    ("4x8s", 40, 30, 70, False, None, None):
        "b1bec6a348a8705d8eb16222d95e851fe412bd8422e8174917443948a05b1d0c",
    ("8x4", 40, 50, 30, True, None, None):
        "0b276e4174ee0a1622c78acfb8ba1e9ad3f72908826513dcadc1d6f601f1b4a2",
    ("8x4", 40, 50, 30, False, None, None):
        "75f89e88eb7344515121b6cf88389062eaa44f6a1924d5910e731725aa51e4b6",
    ("8x8", 1, 1, 1, True, None, None):
        "89cfc65530c3b8ee9662fa04222e174e1ec665ffeef2636d93af92deb537f025",
    ("8x8", 1, 1, 1, False, None, None):
        "2edaa838dd1b1da8df2ea170fc263c42e949d54ac7c6ae72d105d0900463cf70",
    ("8x8", 1, 384, 9, True, None, None):
        "53f628989eefada8a6b829d1d35b5fe7bcbd9bfbbb5ff48df1b2c1e6c87f51f1",
    ("8x8", 1, 384, 9, False, None, None):
        "5dba0a375238aa01d77d098b0d1b04f0ea3e02289ed555b231e35ff85403dbda",
    ("8x8", 7, 33, 384, True, None, None):
        "06d12b4efd5b394087756f687ad243ad4b256c4fbb333bcc2ae4b682c8072db3",
    ("8x8", 7, 33, 384, False, None, None):
        "975df1a2ab0ad0b4fa0a3c43693d7fbb2cd5735fa8ff2a64a091f2216e00440c",
    ("8x8", 8, 1, 1, True, None, None):
        "63afd096c265be451f5815516ce75c33a9093022da5fc317b1cca4b11b220b10",
    ("8x8", 8, 1, 1, False, None, None):
        "54b482cd970887155f964de2035da5f5651f2f83cc52a3f06097489df016a4e1",
    ("8x8", 9, 384, 33, True, None, None):
        "d1cf4d626cd152a5c32933215a64fec8cdbfc79574e0ec01cd66bb33db0bc999",
    ("8x8", 9, 384, 33, False, None, None):
        "3d8143397505546ac14f6696432ec34299990f2956d46181a035e0ffe75188f9",
    ("8x8", 32, 384, 384, True, None, None):
        "a00c87d65359950786532f8ffe049f8844e3b3f2108858eb01f194222cb6b772",
    ("8x8", 32, 384, 384, False, None, None):
        "c1517d3078ef40e3450a2f6dba6b75740ec81b83a66d3996b334b331f8e000f3",
    ("8x8", 32, 384, 1536, True, None, None):
        "b4cdde9c548ca8ff30e5af75bdfab3f6d8c646d1a4a881a66394c1512cf3d8a6",
    ("8x8", 32, 384, 1536, False, None, None):
        "c8cc1d8f77e7238ce19483b904cec445c05b911c9148b72097fbeea4cd3c5985",
    ("8x8", 32, 1536, 384, True, None, None):
        "7f9a766d2320f4eaa37e1e534c82e39bb643c0548114b2924bab48929e028432",
    ("8x8", 32, 1536, 384, False, None, None):
        "6f77d1e3b24fc7085cfe97bf437eab47211a77cc5ec253c1e5d480ae850a7639",
    ("8x8", 33, 9, 8, True, None, None):
        "e90e3def32db080cda0e79e8316f9ae805567d0623387d72462eabf575cf4a8c",
    ("8x8", 33, 9, 8, False, None, None):
        "d612007a783f6c8b970ee3a3b86655829ac27adf36ebe36dd3f1663473445360",
    ("8x8", 64, 64, 64, True, None, None):
        "dbb6abefe1abc282914a178fb12e11498445aeaa7761b0b209328d4fb9cd7d46",
    ("8x8", 64, 64, 64, False, None, None):
        "c3ffd38b2c65667dc90bc2b132ca57b4eb038c73e1e987809f5d4cf0028fd3af",
    ("8x8", 64, 3000, 24, True, None, None):
        "73bd2cf8e16a856e411626e34dfbd0c0ea3c6bd4ef7d2e5c2834e057fc093595",
    ("8x8", 64, 3000, 24, False, None, None):
        "d0e961967ce959a47c887e76bd5796bbe4a1f8cb6effee593c5c1f2b6866e62d",
    ("8x8", 99, 108, 6, True, None, None):
        "52b3f725cf28399b0fc7e6f3e360939bd5a6ec6dfa76e1c53d0939bc80ae07d5",
    ("8x8", 99, 108, 6, False, None, None):
        "50cb4cc815e81ccf53fa2e26c1820012fc9acb0d1b8e3c5a997b412c3264f7c1",
    ("8x8", 128, 128, 128, True, None, None):
        "a85feefa42c0d8e68dda6f4bd7af0265c3f20be10a9c563debe88508c6b7b098",
    ("8x8", 128, 128, 128, False, None, None):
        "4973fed456d9c1e5fa618c698917044d39db7c5df2996d908b1a82eb57d23b5d",
    ("8x8", 128, 384, 384, True, None, None):
        "e26d5c416daa3cb4104278c7b6cab090b8b72fbb1002463d5e80d7a4386cdbb2",
    ("8x8", 128, 384, 384, False, None, None):
        "55a671b5b82469e5096575deda7bd965e5ba16d9b7ee9275ac2c14b43d6fed21",
    ("8x8", 130, 36, 37, True, None, None):
        "037bd6f47943782abdad86b30bea02684fbbd57f1e510cf55586f189424680be",
    ("8x8", 130, 36, 37, False, None, None):
        "418eaef8a9970f467434523a7f61eda72124e566216874d6c36de127ee24080a",
    ("8x8", 256, 256, 256, True, None, None):
        "50f7565ced542bd92a7af080976d5eb67d014c62b9117ce5b011242b66518dad",
    ("8x8", 256, 256, 256, False, None, None):
        "ae8c051c36b1b8cfbb7a8f01d2a3e2ff4d16fe4f9b68e6272b722c3e30164af0",
    ("8x8", 384, 8, 7, True, None, None):
        "59449d3f9b9e3ad0036aea2035e44b5f1c7929510879af862142905cf9b7514d",
    ("8x8", 384, 8, 7, False, None, None):
        "40a6e8706d2d9770089c8bea44c0d3d02b2bbc37eb2768d96ed9fa5432efd433",
    ("8x8", 512, 512, 512, True, None, None):
        "fa3959357dd916014ff017ce3f83c86a1f8d549ac8e6a9da7c1a96d20bcd2bd0",
    ("8x8", 512, 512, 512, False, None, None):
        "3077f3604ecbcce29be1f30ff9152e4c29d575cba2e810a71c5ec7fced5d8828",
    ("8x8", 513, 40, 40, True, None, None):
        "1a2f6f30697831527d6046179bd0ad21fbe8500c338e37349e0c94a8cffb362c",
    ("8x8", 513, 40, 40, False, None, None):
        "0ed165e277bef34226dc89087badbd3685fbf2ba919f3724ae4a4368c74f34d6",
    ("8x8", 1024, 25, 17, True, None, None):
        "e19ff055eccda42e17560bb5923ba087f4be6bc50349798db23315308b88a58e",
    ("8x8", 1024, 25, 17, False, None, None):
        "d9d437f8fa6b2654629c51284562c1b5c52879fccab416c03ecb3b3cec9b2544",
    ("8x8", 2000, 16, 16, True, None, None):
        "bbcea45a747a9cb10826b0aad19eaddb6e2860bb97291603f3d35d23bb02a508",
    ("8x8", 2000, 16, 16, False, None, None):
        "0aa07b0568e48c8ab4bbfdd8314df6e9451cd1d5339219cd41da1e364b40ef9a",
    ("8x8", 5000, 64, 8, True, None, None):
        "228637037f1ecd030c8deffefa35373cad20b5620178838ec229119547006e46",
    ("8x8", 5000, 64, 8, False, None, None):
        "aaad214984f6e17450d30dd3db66a49d2e013f7a2dcb3eb6be3488fbc5ba4473",
    ("bus128", 77, 200, 50, True, None, None):
        "0dca496ba4daaefc4f670946e4a6b3f4ebea0e83f46f235c0507491a3ff0466c",
    ("bus128", 77, 200, 50, False, None, None):
        "44709ae6e409854ad83c8286c9d186be77f94801be6b972a4f6509bcf87fd246",
    ("bus32", 77, 200, 50, True, None, None):
        "df45ff6cc5e079edf0cf00636d457c460645a85d900d1f2127d7aa0482fd0b79",
    ("bus32", 77, 200, 50, False, None, None):
        "44709ae6e409854ad83c8286c9d186be77f94801be6b972a4f6509bcf87fd246",
    ("fifo1", 70, 90, 30, True, None, None):
        "3c89c43df10c297e44e224bbb608b5394f4ecc6ca9c7cabe7370fdcbdecab737",
    ("fifo1", 70, 90, 30, False, None, None):
        "58a43f9ba0ed86153425703d3cd98a5012b27b3fc0327907b584c25ef1b1fec2",
    ("fifo4", 300, 100, 90, True, None, None):
        "a3f714fdab02d4519afede91644fcee8ee219752be95c93b874581c41e49cb85",
    ("fifo4", 300, 100, 90, False, None, None):
        "38076d2262725ed3bd79201057e7155e2906deada2f296169705be792925f4f7",
    ("tiny4", 33, 384, 9, True, None, None):
        "c2efb9299ad8d29652491427ce89d8e103198c2ce420fb7c14cc050d433aff60",
    ("tiny4", 33, 384, 9, False, None, None):
        "4e62d50bf14542c1b119be59cb52e42953c03296791b49a42877d36009d19e1a",
    ("tiny4", 45, 4, 61, True, None, None):
        "6e9f41745461b2a487865f73629eaeb695720c11f0fe432bc660cb872632f148",
    ("tiny4", 45, 4, 61, False, None, None):
        "4c7c2ba3aab184866b31f73caf23414e1e71a13ec11412cdb2a7ddef8f66d184",
    ("tiny4", 90, 112, 24, True, None, None):
        "6f6ec64ad458c4b99730b4593d9283dacbfa3d3e5485520440270462ed9f2610",
    ("tiny4", 90, 112, 24, False, None, None):
        "86ecebfbb888e1989678c7f3184d4270d8e8e4dd40962a15b8ef8dabb824ac4a",
    ("tiny4", 200, 200, 30, True, None, None):
        "427781599d696604db12be91fc63b81fc075915d79f2d265d185f24c30253a26",
    ("tiny4", 200, 200, 30, False, None, None):
        "b6f0e8c131ae075614d3932ad24b6aa7af794ba05d34896a15f04748575dfd54",
    ("tiny8", 3, 500, 3, True, None, None):
        "c7d686becf88c0369e95a4b3267bc22551cdfd0a83cb4ec3d1c2a7c29b8b2a22",
    ("tiny8", 3, 500, 3, False, None, None):
        "9b82f4ae74465fb680313e994a84afc31f64fda68ae60f33c52d99b9e0794978",
    ("tiny8", 33, 384, 9, True, None, None):
        "44895222a351710c9a00c0cbc14dafe86e88a44fcba838c11869a7eca5241d03",
    ("tiny8", 33, 384, 9, False, None, None):
        "533329d8b6e6a9742178132c23c045731d3c0e0734ee6095d50b630b3bf084e5",
    ("tiny8", 384, 7, 1, True, None, None):
        "eb0cda7c13b8b89e805972bb6e7291ff501a6d54209e61907f7788f80ea7f609",
    ("tiny8", 384, 7, 1, False, None, None):
        "3020c13d5f95e76be569d64b85d6b6b800e64f4f21119e40e217fca8b2db1a92",
    ("8x8", 100, 200, 50, True, (1000, 2000), (512, 512)):
        "f4242a885fde4dc6caa8a23f73b3cc78c9c41349a249649a731a6b98736bf3a0",
    ("8x8", 100, 200, 50, False, (1000, 2000), (512, 512)):
        "7efc61723270e21e8ede76049af570ddac5f334d423aaf0f4eec41517e7b30ab",
    ("8x8", 64, 64, 64, True, (2048, 1024), (0, 256)):
        "7279c0c4af517ca7f88827aecc58ad2e1f7b311e46331d443e7d9dd64474b83a",
    ("8x8", 64, 64, 64, False, (2048, 1024), (0, 256)):
        "d5ff607dbca188c45d95a305734faa879128e44dc79911990faf2c8b68b18be2",
    ("4x4", 33, 40, 17, True, (100, 900), (10, 300)):
        "00f2bc5443ac17f65ba6a5047cb70b149513fbf9e2c31aefc74e7f74b7134050",
    ("4x4", 33, 40, 17, False, (100, 900), (10, 300)):
        "b5ab3f591f01bf345a2693f099dca12a6b90f674ebd8df3eda2749a3e8428f05",
}

#: digests of the FORCED tilings of test_linear, in order
FORCED_DIGESTS = [
    "98a393bdf6e1c57bfeb1c1f0c72c6026b7443a07a7d1680b5c7beb78b3c0a1fc",
    "697d2e6917b2fe294c2f11739e108b166364a2448816cdff581cf52d37677cd9",
    "15e4f152a0770c0fe4b963833650f2e228717b3c5586389d4f941c52480b4958",
    "e2191648a296945e0349120dc74f86fb358aa5f45a38940d58758228b09db29a",
    "01fac61b016a2ccd3c7a6cb3b651112e1b5bd2bb93f15872d870ff2cc23e4344",
    "004687314415e9d01bc1672645b5326673377b14548142e08d6b182d2c5072a8",
    "fbcb30d1e2d5a03eae929df320822a5e2aa4514766e471501c14934c21393012",
    "cce16902eefc940d2afe2b7e350864070a30a6d00f90d63f7763e6b7f32bfab7",
    "22e93e0b49e14613b62d75d984ffcdc0904c57fe41541f1a676474ccccbe77a8",
    "967362cfa8d66f50d01ded701400d8260fc265db584b12eab7f9c8202301a163",
    "ff13b571a75dcb7f254708564c7b157d4256184441cda8279daf326b0e5bd246",
    "a47ad27bba05a4176f3d766c68fec19e22b1aeb8bfe863e7633e9548805e5746",
    "3a52743e3d4025d4ea71564e5f015aa4f6103168d15f44626e4f5d84f850268d",
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
