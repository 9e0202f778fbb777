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
        "760c4bc734c14841872adc2acb7a8ac5585d26fd971d1db73d55fe4dcb0aae47",
    ("16x16", 64, 64, 64, False, None, None):
        "27d2ab4a811dda7f08287709581b99bb52908fbb459cff793f065cba78c04b74",
    ("16x16", 128, 128, 128, True, None, None):
        "dc0822a3662c9ddb842bb00386c2b66ccb1ea106e707b86a4947c4066a2d9728",
    ("16x16", 128, 128, 128, False, None, None):
        "bff51be07107eeec3597b35fb7d0dd3914c30e47b7dfdf6479852322dc8e985f",
    ("16x16", 256, 256, 256, True, None, None):
        "116bddde483d5f59169f69224e321fbd14a221e034cf252e607bdea8b321c70a",
    ("16x16", 256, 256, 256, False, None, None):
        "27d7c2c9d1f20f04ba7c206d1934933bbc63890c08d13396df1dc77c67f8c1f3",
    ("16x16", 512, 512, 512, True, None, None):
        "5a494d09d176d1c7a8a868b0b4f1eeefdac0dc8a4411432bfa928bf99763403c",
    ("16x16", 512, 512, 512, False, None, None):
        "6e9d76310af462252ca2f8c3a6d2dfa492e691819dbea552869b079f4de8c0d1",
    ("16x16", 1000, 1000, 40, True, None, None):
        "2cfb7b5504b1f7df6e31dd09be919c73dbc59e02d04d85fae479cbd45d803794",
    ("16x16", 1000, 1000, 40, False, None, None):
        "74b250db82514c906ae69cc2989096cca253353fe92dd72ee20eed065a7e3ccf",
    ("32x32", 100, 300, 200, True, None, None):
        "07c762d6ceebec38700c8712653492e38295efe97d56db9d23141ebf2e4300c5",
    ("32x32", 100, 300, 200, False, None, None):
        "e0369e337953f923bdc643b99b61386ebdfc78c22a31086304e0e406f77790f0",
    ("4x4", 1, 7, 9, True, None, None):
        "5950466b1b245aab8d30d4d9be07fe5b01eb4ea9419ee34663bfc1177dff4219",
    ("4x4", 1, 7, 9, False, None, None):
        "be37e1c7a863a33ca67794e87506d72d4faddf3fc0a92c1cd6880ed89047c92a",
    ("4x4", 7, 9, 384, True, None, None):
        "51fe5e027f5fe5fb2d6dcb69c9f66334ae76426592900fec78e7a729eb4d246c",
    ("4x4", 7, 9, 384, False, None, None):
        "2372dc0afe4a3197a525c50ca714dfa6433b68a539916f55368f61154bd94325",
    ("4x4", 9, 8, 33, True, None, None):
        "6148df332fe71b8eafb2c4c8876bb436f148b9f4b70324b7802622da77f4dc7a",
    ("4x4", 9, 8, 33, False, None, None):
        "534020dcd6b5c49294ead89ecf4acc01cc01047eb22a71587539d458eaf5422e",
    ("4x4", 32, 384, 384, True, None, None):
        "312fb89f364d98e315383f0096e770fbacf8113ddf24d958e6a4909ea4bbdf84",
    ("4x4", 32, 384, 384, False, None, None):
        "df2a15bc586be55a80f8d443ba6b3ca9334a7a861824a4081da1f4b8ba45e61c",
    ("4x4", 33, 384, 8, True, None, None):
        "b6af0e22132d0cf7f6d5c95be10ed14740045486d8260538a6329e26e495d0b1",
    ("4x4", 33, 384, 8, False, None, None):
        "090faade8a45d214e26f8a09580cb107fa3f1b10b3385f977d7856fa6e9fbad5",
    ("4x4", 384, 33, 7, True, None, None):
        "68fd3c053194858c761c90f8f73776dc8c9888326952c8406117e83cd8df16cd",
    ("4x4", 384, 33, 7, False, None, None):
        "5d63a19cb6539dca39cc32611d27180678e347fdd6cf4cd5cf270ea5a275327b",
    ("4x8s", 40, 30, 70, True, None, None):
        "18514a271dbd3b412be393f727f5a2d1639a8e13e8aa87d6f6f3bf036ba454cf",
    ("4x8s", 40, 30, 70, False, None, None):
        "b1bec6a348a8705d8eb16222d95e851fe412bd8422e8174917443948a05b1d0c",
    ("8x4", 40, 50, 30, True, None, None):
        "992c87bde210c18f03d4cd284be9e0d24d5d4aa0bbb6b9025e5c5aaeac00a4cb",
    ("8x4", 40, 50, 30, False, None, None):
        "75f89e88eb7344515121b6cf88389062eaa44f6a1924d5910e731725aa51e4b6",
    ("8x8", 1, 1, 1, True, None, None):
        "89cfc65530c3b8ee9662fa04222e174e1ec665ffeef2636d93af92deb537f025",
    ("8x8", 1, 1, 1, False, None, None):
        "2edaa838dd1b1da8df2ea170fc263c42e949d54ac7c6ae72d105d0900463cf70",
    ("8x8", 1, 384, 9, True, None, None):
        "3713e2482e0bfbff9a611eae979d770ab7e5485290013507e9a4c0239b9e307b",
    ("8x8", 1, 384, 9, False, None, None):
        "5dba0a375238aa01d77d098b0d1b04f0ea3e02289ed555b231e35ff85403dbda",
    ("8x8", 7, 33, 384, True, None, None):
        "5d4365ccf4fa6b1f5864c700af3768a492cbdeed3f8de280d6260f35cd3d81fe",
    ("8x8", 7, 33, 384, False, None, None):
        "975df1a2ab0ad0b4fa0a3c43693d7fbb2cd5735fa8ff2a64a091f2216e00440c",
    ("8x8", 8, 1, 1, True, None, None):
        "63afd096c265be451f5815516ce75c33a9093022da5fc317b1cca4b11b220b10",
    ("8x8", 8, 1, 1, False, None, None):
        "54b482cd970887155f964de2035da5f5651f2f83cc52a3f06097489df016a4e1",
    ("8x8", 9, 384, 33, True, None, None):
        "8cc442061d284cd3eb4a21666503922862b6c488cfaa523f9406d7e719f1a9ac",
    ("8x8", 9, 384, 33, False, None, None):
        "3d8143397505546ac14f6696432ec34299990f2956d46181a035e0ffe75188f9",
    ("8x8", 32, 384, 384, True, None, None):
        "60737ddbdf206a33411b432c4b1ac97ef1fb0c014b59ea6032f766cb59c6623d",
    ("8x8", 32, 384, 384, False, None, None):
        "c1517d3078ef40e3450a2f6dba6b75740ec81b83a66d3996b334b331f8e000f3",
    ("8x8", 32, 384, 1536, True, None, None):
        "3ad60e4313e6287193fb3ff23a6729d584f7590b6ef7e953c99b5b08a4c6aa3e",
    ("8x8", 32, 384, 1536, False, None, None):
        "c8cc1d8f77e7238ce19483b904cec445c05b911c9148b72097fbeea4cd3c5985",
    ("8x8", 32, 1536, 384, True, None, None):
        "0b30a46dfeba8269d1229d19babdcec8c759eccdb138ea5a01a2276a6cd6c4d9",
    ("8x8", 32, 1536, 384, False, None, None):
        "6f77d1e3b24fc7085cfe97bf437eab47211a77cc5ec253c1e5d480ae850a7639",
    ("8x8", 33, 9, 8, True, None, None):
        "71e320bfd4d34856e6c87384f9ac05a05c9604cab8d07b7aff81b64a5c281577",
    ("8x8", 33, 9, 8, False, None, None):
        "d612007a783f6c8b970ee3a3b86655829ac27adf36ebe36dd3f1663473445360",
    ("8x8", 64, 64, 64, True, None, None):
        "812bab75e724f23fbd7a9f0387d0ec3ecf1b3d9f5c721bf24e3883bbf984cee2",
    ("8x8", 64, 64, 64, False, None, None):
        "c3ffd38b2c65667dc90bc2b132ca57b4eb038c73e1e987809f5d4cf0028fd3af",
    ("8x8", 64, 3000, 24, True, None, None):
        "961e3c11e452fa166aa3144e2cf129a2901b324f96bcce0d704f2380265886ca",
    ("8x8", 64, 3000, 24, False, None, None):
        "d0e961967ce959a47c887e76bd5796bbe4a1f8cb6effee593c5c1f2b6866e62d",
    ("8x8", 99, 108, 6, True, None, None):
        "f5e96b52127f2ef92cc21f3e9655246962edfbc7af59b28f1e5bba4c11ae41c4",
    ("8x8", 99, 108, 6, False, None, None):
        "50cb4cc815e81ccf53fa2e26c1820012fc9acb0d1b8e3c5a997b412c3264f7c1",
    ("8x8", 128, 128, 128, True, None, None):
        "b18953b5d0240669994822cc66810efe12178aa65e2d9a70c85a208736c521f1",
    ("8x8", 128, 128, 128, False, None, None):
        "4973fed456d9c1e5fa618c698917044d39db7c5df2996d908b1a82eb57d23b5d",
    ("8x8", 128, 384, 384, True, None, None):
        "104a5cec2cc9f330085f546eec9deaca064b5512b820a7b308859e003ba5592e",
    ("8x8", 128, 384, 384, False, None, None):
        "55a671b5b82469e5096575deda7bd965e5ba16d9b7ee9275ac2c14b43d6fed21",
    ("8x8", 130, 36, 37, True, None, None):
        "de07061b7ef02617d9105702c1c825ade0a96e2bfcccc0c2308d99e3d90a49a7",
    ("8x8", 130, 36, 37, False, None, None):
        "418eaef8a9970f467434523a7f61eda72124e566216874d6c36de127ee24080a",
    ("8x8", 256, 256, 256, True, None, None):
        "6844cf59b2c73dbee0df72cc91126ab089726bc8d4dbdd6333496980ea73bbb1",
    ("8x8", 256, 256, 256, False, None, None):
        "ae8c051c36b1b8cfbb7a8f01d2a3e2ff4d16fe4f9b68e6272b722c3e30164af0",
    ("8x8", 384, 8, 7, True, None, None):
        "59449d3f9b9e3ad0036aea2035e44b5f1c7929510879af862142905cf9b7514d",
    ("8x8", 384, 8, 7, False, None, None):
        "40a6e8706d2d9770089c8bea44c0d3d02b2bbc37eb2768d96ed9fa5432efd433",
    ("8x8", 512, 512, 512, True, None, None):
        "4cfb7f4b2e2a3d63c60e4a426d9705dfbb49b37a2b12bc80805acdc21fbf6aa5",
    ("8x8", 512, 512, 512, False, None, None):
        "3077f3604ecbcce29be1f30ff9152e4c29d575cba2e810a71c5ec7fced5d8828",
    ("8x8", 513, 40, 40, True, None, None):
        "5496356f9c4fc135d2bb5bc71e8a65b7d253ee4597861cdea2e27a80557b1c25",
    ("8x8", 513, 40, 40, False, None, None):
        "0ed165e277bef34226dc89087badbd3685fbf2ba919f3724ae4a4368c74f34d6",
    ("8x8", 1024, 25, 17, True, None, None):
        "095563e9d03f1d0f616aceb4161b63ff813b1fdc36c72b7c0d1b70b8525b7713",
    ("8x8", 1024, 25, 17, False, None, None):
        "d9d437f8fa6b2654629c51284562c1b5c52879fccab416c03ecb3b3cec9b2544",
    ("8x8", 2000, 16, 16, True, None, None):
        "3ce4ea8d74b96170f42379dd7c750170a2a1c8f1851bb173490eb7e819490af4",
    ("8x8", 2000, 16, 16, False, None, None):
        "0aa07b0568e48c8ab4bbfdd8314df6e9451cd1d5339219cd41da1e364b40ef9a",
    ("8x8", 5000, 64, 8, True, None, None):
        "2e594916006c38b0bfae499c81aa6ecef46c3c128c703dd343e1bcd8bd6f6281",
    ("8x8", 5000, 64, 8, False, None, None):
        "aaad214984f6e17450d30dd3db66a49d2e013f7a2dcb3eb6be3488fbc5ba4473",
    ("bus128", 77, 200, 50, True, None, None):
        "f33acc4e718e390ac0183166fd57d275ed96160d7854d07899b1619a84d35cf5",
    ("bus128", 77, 200, 50, False, None, None):
        "44709ae6e409854ad83c8286c9d186be77f94801be6b972a4f6509bcf87fd246",
    ("bus32", 77, 200, 50, True, None, None):
        "52cb234cc4cdf0fe5346e8a84e1b1a913f6aeafe7d519523775cdf9770db8f3b",
    ("bus32", 77, 200, 50, False, None, None):
        "44709ae6e409854ad83c8286c9d186be77f94801be6b972a4f6509bcf87fd246",
    ("fifo1", 70, 90, 30, True, None, None):
        "dc3a7dd0a381b26c3b945e8471ea63b3cf04c57667d42f056774b472e0a72697",
    ("fifo1", 70, 90, 30, False, None, None):
        "58a43f9ba0ed86153425703d3cd98a5012b27b3fc0327907b584c25ef1b1fec2",
    ("fifo4", 300, 100, 90, True, None, None):
        "daad71a3edcae0c3f2d8611ef745e21f974b20d6eda922679a0004c5e36f37ba",
    ("fifo4", 300, 100, 90, False, None, None):
        "38076d2262725ed3bd79201057e7155e2906deada2f296169705be792925f4f7",
    ("tiny4", 33, 384, 9, True, None, None):
        "0212a9c95ffe8fbb27ddae4997cd7da4706539cfcca35606e0502053b3224fad",
    ("tiny4", 33, 384, 9, False, None, None):
        "4e62d50bf14542c1b119be59cb52e42953c03296791b49a42877d36009d19e1a",
    ("tiny4", 45, 4, 61, True, None, None):
        "6e9f41745461b2a487865f73629eaeb695720c11f0fe432bc660cb872632f148",
    ("tiny4", 45, 4, 61, False, None, None):
        "4c7c2ba3aab184866b31f73caf23414e1e71a13ec11412cdb2a7ddef8f66d184",
    ("tiny4", 90, 112, 24, True, None, None):
        "7bbeae0df8373e50e36fc95510ac6a22069da4b49f6b7105ee28250e1a113623",
    ("tiny4", 90, 112, 24, False, None, None):
        "86ecebfbb888e1989678c7f3184d4270d8e8e4dd40962a15b8ef8dabb824ac4a",
    ("tiny4", 200, 200, 30, True, None, None):
        "edcf7e73e92e8ef0a32b730af8a50dad0b78f130009798df6bae15f7b557952c",
    ("tiny4", 200, 200, 30, False, None, None):
        "b6f0e8c131ae075614d3932ad24b6aa7af794ba05d34896a15f04748575dfd54",
    ("tiny8", 3, 500, 3, True, None, None):
        "5add2c99742520ae52e0ac0ea12fb0dd7613ee11b2b8034c6e874e7178a0dda0",
    ("tiny8", 3, 500, 3, False, None, None):
        "9b82f4ae74465fb680313e994a84afc31f64fda68ae60f33c52d99b9e0794978",
    ("tiny8", 33, 384, 9, True, None, None):
        "303bb394f6402bb0ba96181b1d9b36e84b8f22cace5588826a3243376ca82e1f",
    ("tiny8", 33, 384, 9, False, None, None):
        "533329d8b6e6a9742178132c23c045731d3c0e0734ee6095d50b630b3bf084e5",
    ("tiny8", 384, 7, 1, True, None, None):
        "eb0cda7c13b8b89e805972bb6e7291ff501a6d54209e61907f7788f80ea7f609",
    ("tiny8", 384, 7, 1, False, None, None):
        "3020c13d5f95e76be569d64b85d6b6b800e64f4f21119e40e217fca8b2db1a92",
    ("8x8", 100, 200, 50, True, (1000, 2000), (512, 512)):
        "b16429f300c8f3b89b83b9f8e540cd951209cc5d6c6dfced14e235bcc86b1913",
    ("8x8", 100, 200, 50, False, (1000, 2000), (512, 512)):
        "7efc61723270e21e8ede76049af570ddac5f334d423aaf0f4eec41517e7b30ab",
    ("8x8", 64, 64, 64, True, (2048, 1024), (0, 256)):
        "aa5072a840d88e083bb2f13ae7cb0f7484952f939b36406ac91ae6e7eddf5c7c",
    ("8x8", 64, 64, 64, False, (2048, 1024), (0, 256)):
        "d5ff607dbca188c45d95a305734faa879128e44dc79911990faf2c8b68b18be2",
    ("4x4", 33, 40, 17, True, (100, 900), (10, 300)):
        "3f0663d170783e507414bee266e69274cee38ed0a82efe2b5d5e5eff957e820e",
    ("4x4", 33, 40, 17, False, (100, 900), (10, 300)):
        "b5ab3f591f01bf345a2693f099dca12a6b90f674ebd8df3eda2749a3e8428f05",
}

#: digests of the FORCED tilings of test_linear, in order
FORCED_DIGESTS = [
    "63fce019ce40fbffa088d639a095bc5690fad9f7f11c7a7d439f04c8cf419044",
    "3bdb688169c62dccfd9d618aa02343bf7b4d318265a65bb2995450646c355ce5",
    "15e4f152a0770c0fe4b963833650f2e228717b3c5586389d4f941c52480b4958",
    "5e1de39f4d9923e9eea07995600f6c8e0b2c2469329dbcd89011f0a94fca0e74",
    "2851500ddd2075b5fd0ea8ca6251502d2a316fca8ef93538eadf72a09d9cf20d",
    "dbb3c0e7fdafa1e9338fb21a227c79a3a8bb9c606afaaf4afe6068feb8e312a6",
    "0fe67d1a0bfde18d15a8833fa090b7f2c60b455bbe9676a258968b1cbdda3ed0",
    "4f24d223cbc8a48109f7e5198c2126ecf0e7dd5030446d9ad39c61366f65b6c3",
    "c667c2bad25934985fbd0f34267079da1b0d4d80d7c55ec3bc741661edb00336",
    "967362cfa8d66f50d01ded701400d8260fc265db584b12eab7f9c8202301a163",
    "e48b3935633fe4e746787b0718c5a9d061137f79dfb48bab9030d8dfd2a2559a",
    "091a07fa2403badd3d8173993d6d0782c1cebbef06c9e74ebf5cae2c5e903175",
    "f97642872b533c32a4cfa3a94847bab1d9e1c78ba7e0642e8d0be2540e973730",
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
