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
        "09f4221291f24d69794200eee1ce55dc4a78e91d6eac6b109fe66523629cd05a",
    ("16x16", 64, 64, 64, False, None, None):
        "27d2ab4a811dda7f08287709581b99bb52908fbb459cff793f065cba78c04b74",
    ("16x16", 128, 128, 128, True, None, None):
        "88f828ee1e49608c4735cf28eca7c4046e17b565640ad71935b2bf49fb69e312",
    ("16x16", 128, 128, 128, False, None, None):
        "bff51be07107eeec3597b35fb7d0dd3914c30e47b7dfdf6479852322dc8e985f",
    ("16x16", 256, 256, 256, True, None, None):
        "c6e2237ce839aff7874332eaa33d89d90658704d5420f8fff3db44181236a3ba",
    ("16x16", 256, 256, 256, False, None, None):
        "27d7c2c9d1f20f04ba7c206d1934933bbc63890c08d13396df1dc77c67f8c1f3",
    ("16x16", 512, 512, 512, True, None, None):
        "93b95b406b3b9b5d2f82a6bf26059907edee98a14fe93d5e9be59003c452238b",
    ("16x16", 512, 512, 512, False, None, None):
        "6e9d76310af462252ca2f8c3a6d2dfa492e691819dbea552869b079f4de8c0d1",
    ("16x16", 1000, 1000, 40, True, None, None):
        "4f4bdd6e5328e22b681cf77e4ad477f2a148753119c30e178b4eab49e9606add",
    ("16x16", 1000, 1000, 40, False, None, None):
        "74b250db82514c906ae69cc2989096cca253353fe92dd72ee20eed065a7e3ccf",
    ("32x32", 100, 300, 200, True, None, None):
        "24aa2a9f55f87265478da864f5202f440166c1d8df90164b056221e25d952f03",
    ("32x32", 100, 300, 200, False, None, None):
        "e0369e337953f923bdc643b99b61386ebdfc78c22a31086304e0e406f77790f0",
    ("4x4", 1, 7, 9, True, None, None):
        "342a32262d5b7708ceac364edd9ba82ed0f598ac7542e41e25bd66be1f83a79d",
    ("4x4", 1, 7, 9, False, None, None):
        "be37e1c7a863a33ca67794e87506d72d4faddf3fc0a92c1cd6880ed89047c92a",
    ("4x4", 7, 9, 384, True, None, None):
        "d323c3246df48ecfac0f59f39f582b3c883521d0f0310761509a8870ab41c7b8",
    ("4x4", 7, 9, 384, False, None, None):
        "2372dc0afe4a3197a525c50ca714dfa6433b68a539916f55368f61154bd94325",
    ("4x4", 9, 8, 33, True, None, None):
        "7b6b8e33d9ea61c1e349fa4cb492ee74bb42a48e3590e201f0ad13a84573d136",
    ("4x4", 9, 8, 33, False, None, None):
        "534020dcd6b5c49294ead89ecf4acc01cc01047eb22a71587539d458eaf5422e",
    ("4x4", 32, 384, 384, True, None, None):
        "b1114a3e4722c509c975b9aeedc3097a6b150ae6a2354314bc5357caff27a09d",
    ("4x4", 32, 384, 384, False, None, None):
        "df2a15bc586be55a80f8d443ba6b3ca9334a7a861824a4081da1f4b8ba45e61c",
    ("4x4", 33, 384, 8, True, None, None):
        "3129337e974ab389e039ee104486f7bea780d6a5d5e1aafa9a6c3617264b4372",
    ("4x4", 33, 384, 8, False, None, None):
        "090faade8a45d214e26f8a09580cb107fa3f1b10b3385f977d7856fa6e9fbad5",
    ("4x4", 384, 33, 7, True, None, None):
        "f3f69c6f602b94a1b5b3bf57b2214b660cb04cf3152bd374d24a9ab01ba53bc1",
    ("4x4", 384, 33, 7, False, None, None):
        "5d63a19cb6539dca39cc32611d27180678e347fdd6cf4cd5cf270ea5a275327b",
    ("4x8s", 40, 30, 70, True, None, None):
        "6585d728f2683088a72573fab11c80629d0dbb11ac0d31ff0c8fafabf5781bc0",
    ("4x8s", 40, 30, 70, False, None, None):
        "b1bec6a348a8705d8eb16222d95e851fe412bd8422e8174917443948a05b1d0c",
    ("8x4", 40, 50, 30, True, None, None):
        "6676fccfe4caa2ba4c7271c13cef8dbf14cccc840d8a91c53011f5d84ab7c0df",
    ("8x4", 40, 50, 30, False, None, None):
        "75f89e88eb7344515121b6cf88389062eaa44f6a1924d5910e731725aa51e4b6",
    ("8x8", 1, 1, 1, True, None, None):
        "8f5879a3da7c27624076343d5af3e3b647a9111c90e27798ece0ec6807ced0c5",
    ("8x8", 1, 1, 1, False, None, None):
        "2edaa838dd1b1da8df2ea170fc263c42e949d54ac7c6ae72d105d0900463cf70",
    ("8x8", 1, 384, 9, True, None, None):
        "96bb8c694d8ddbd6e95571daa0937e3e7ebdd09781e243e4a13f11969dd4eab2",
    ("8x8", 1, 384, 9, False, None, None):
        "5dba0a375238aa01d77d098b0d1b04f0ea3e02289ed555b231e35ff85403dbda",
    ("8x8", 7, 33, 384, True, None, None):
        "ecbea2056eac673a4e13d718726f66c4bd8f411ddc9ecaac7b752376c72e6f4a",
    ("8x8", 7, 33, 384, False, None, None):
        "975df1a2ab0ad0b4fa0a3c43693d7fbb2cd5735fa8ff2a64a091f2216e00440c",
    ("8x8", 8, 1, 1, True, None, None):
        "62423470f27f5a20c2a8e1a7c768a963f579d3de3061d458dda9bcc53dc4e513",
    ("8x8", 8, 1, 1, False, None, None):
        "54b482cd970887155f964de2035da5f5651f2f83cc52a3f06097489df016a4e1",
    ("8x8", 9, 384, 33, True, None, None):
        "10e9d4422e6d618478de2ebb09d3832264bf4097854b680a141e3991377d6c28",
    ("8x8", 9, 384, 33, False, None, None):
        "3d8143397505546ac14f6696432ec34299990f2956d46181a035e0ffe75188f9",
    ("8x8", 32, 384, 384, True, None, None):
        "42787dcad9afa73072154c2d2f003b7e8012af8fdab265c0ed17ca1d2f53425d",
    ("8x8", 32, 384, 384, False, None, None):
        "c1517d3078ef40e3450a2f6dba6b75740ec81b83a66d3996b334b331f8e000f3",
    ("8x8", 32, 384, 1536, True, None, None):
        "74ac00a06b23186dceb1c9d9cf0a21137f47399c9dbbd2f73df91b2c49fed7ce",
    ("8x8", 32, 384, 1536, False, None, None):
        "c8cc1d8f77e7238ce19483b904cec445c05b911c9148b72097fbeea4cd3c5985",
    ("8x8", 32, 1536, 384, True, None, None):
        "1b8278e9d28af16b3e9bbfbd0cc59c83234204449928e371e374babf89876d0a",
    ("8x8", 32, 1536, 384, False, None, None):
        "6f77d1e3b24fc7085cfe97bf437eab47211a77cc5ec253c1e5d480ae850a7639",
    ("8x8", 33, 9, 8, True, None, None):
        "923f0efac4d33436e774088c4f822af76ef0c6c9e019f7c26e18511b60949591",
    ("8x8", 33, 9, 8, False, None, None):
        "d612007a783f6c8b970ee3a3b86655829ac27adf36ebe36dd3f1663473445360",
    ("8x8", 64, 64, 64, True, None, None):
        "c82e373135931d6c7529acfb9016ea83fe38c379373b108b07ec26862a0d6f7b",
    ("8x8", 64, 64, 64, False, None, None):
        "c3ffd38b2c65667dc90bc2b132ca57b4eb038c73e1e987809f5d4cf0028fd3af",
    ("8x8", 64, 3000, 24, True, None, None):
        "be28c1c5818db18730815bda83a196f3160457d86f87e6b9334b1b6413e89137",
    ("8x8", 64, 3000, 24, False, None, None):
        "d0e961967ce959a47c887e76bd5796bbe4a1f8cb6effee593c5c1f2b6866e62d",
    ("8x8", 99, 108, 6, True, None, None):
        "e5236b307b80441959dd77bd094bd99d610148c0eabaeffb58451474068e58ba",
    ("8x8", 99, 108, 6, False, None, None):
        "50cb4cc815e81ccf53fa2e26c1820012fc9acb0d1b8e3c5a997b412c3264f7c1",
    ("8x8", 128, 128, 128, True, None, None):
        "1cbb05f0cf3cac5b1f996544dcff1cb4f9d788bd5ee79395e1547827ec7df304",
    ("8x8", 128, 128, 128, False, None, None):
        "4973fed456d9c1e5fa618c698917044d39db7c5df2996d908b1a82eb57d23b5d",
    ("8x8", 128, 384, 384, True, None, None):
        "4c80587277ce86c1fccb423cd915dda65ce0e8e6116a54652edb07450aa2fe0e",
    ("8x8", 128, 384, 384, False, None, None):
        "55a671b5b82469e5096575deda7bd965e5ba16d9b7ee9275ac2c14b43d6fed21",
    ("8x8", 130, 36, 37, True, None, None):
        "b3320f95462e9da2a457dc43b1584b407c1adffec718cb5b9f3feae02340e9bf",
    ("8x8", 130, 36, 37, False, None, None):
        "418eaef8a9970f467434523a7f61eda72124e566216874d6c36de127ee24080a",
    ("8x8", 256, 256, 256, True, None, None):
        "d9a6dc77036753a682156fefc759715412f4675b65ba7211af9911744edaaa2b",
    ("8x8", 256, 256, 256, False, None, None):
        "ae8c051c36b1b8cfbb7a8f01d2a3e2ff4d16fe4f9b68e6272b722c3e30164af0",
    ("8x8", 384, 8, 7, True, None, None):
        "abdd0c279a44cf4c7e38d4946858194aa68068efbf3bbef144ba6e8fe393837b",
    ("8x8", 384, 8, 7, False, None, None):
        "40a6e8706d2d9770089c8bea44c0d3d02b2bbc37eb2768d96ed9fa5432efd433",
    ("8x8", 512, 512, 512, True, None, None):
        "a22a63546a3bf2baf49dc2bd863f550e339f1b7237055ab446aee179d041f02a",
    ("8x8", 512, 512, 512, False, None, None):
        "3077f3604ecbcce29be1f30ff9152e4c29d575cba2e810a71c5ec7fced5d8828",
    ("8x8", 513, 40, 40, True, None, None):
        "dc8742091784959f4d48a64026fa70da81264d6476b0e4e19d7db31a385a6adc",
    ("8x8", 513, 40, 40, False, None, None):
        "0ed165e277bef34226dc89087badbd3685fbf2ba919f3724ae4a4368c74f34d6",
    ("8x8", 1024, 25, 17, True, None, None):
        "93ae5b7c4c1295d96b2883edfcefaa2d5d2a8d17b983acf1ff36113c0ac75f44",
    ("8x8", 1024, 25, 17, False, None, None):
        "d9d437f8fa6b2654629c51284562c1b5c52879fccab416c03ecb3b3cec9b2544",
    ("8x8", 2000, 16, 16, True, None, None):
        "82ba1d6004d827652b0a7fd6cdfee0b6e33f4915835c1d523b09b6b95bcdfb25",
    ("8x8", 2000, 16, 16, False, None, None):
        "0aa07b0568e48c8ab4bbfdd8314df6e9451cd1d5339219cd41da1e364b40ef9a",
    ("8x8", 5000, 64, 8, True, None, None):
        "d9cd1613e2432ae634d28573075bb73c736b5de15222b567b87641bdbbd87682",
    ("8x8", 5000, 64, 8, False, None, None):
        "aaad214984f6e17450d30dd3db66a49d2e013f7a2dcb3eb6be3488fbc5ba4473",
    ("bus128", 77, 200, 50, True, None, None):
        "c7b477b7ea517aee252189142da9842a8242b1b2705c2aeb00d6930aea2bb532",
    ("bus128", 77, 200, 50, False, None, None):
        "44709ae6e409854ad83c8286c9d186be77f94801be6b972a4f6509bcf87fd246",
    ("bus32", 77, 200, 50, True, None, None):
        "de8ea56979e04845f29e390998f56f79b48ec78ba2984174ec8eb424210eb4e1",
    ("bus32", 77, 200, 50, False, None, None):
        "44709ae6e409854ad83c8286c9d186be77f94801be6b972a4f6509bcf87fd246",
    ("fifo1", 70, 90, 30, True, None, None):
        "97b91561653d8aeb160c985c6713bd9917574186b2e3add982fa05a0bfcc9a05",
    ("fifo1", 70, 90, 30, False, None, None):
        "58a43f9ba0ed86153425703d3cd98a5012b27b3fc0327907b584c25ef1b1fec2",
    ("fifo4", 300, 100, 90, True, None, None):
        "58d798397348db3597054771cd8c786b2da2fba6b352f97e54e194cfdfb62988",
    ("fifo4", 300, 100, 90, False, None, None):
        "38076d2262725ed3bd79201057e7155e2906deada2f296169705be792925f4f7",
    ("tiny4", 33, 384, 9, True, None, None):
        "dcf70f896907cea8145f61d9f879255e5b058259f5b848c1436fe53666c52433",
    ("tiny4", 33, 384, 9, False, None, None):
        "4e62d50bf14542c1b119be59cb52e42953c03296791b49a42877d36009d19e1a",
    ("tiny4", 45, 4, 61, True, None, None):
        "8114a8561c976f9ed5573ea1b12baeea7606436d39676acf30f884a96c0e5b22",
    ("tiny4", 45, 4, 61, False, None, None):
        "4c7c2ba3aab184866b31f73caf23414e1e71a13ec11412cdb2a7ddef8f66d184",
    ("tiny4", 90, 112, 24, True, None, None):
        "4fcd28020534d9ee0107922cf33f62195aab89b8349327af96669b1d5f1e9f07",
    ("tiny4", 90, 112, 24, False, None, None):
        "86ecebfbb888e1989678c7f3184d4270d8e8e4dd40962a15b8ef8dabb824ac4a",
    ("tiny4", 200, 200, 30, True, None, None):
        "caeced03087fe0d5c2bcfaeee317b403807a1f8222084da69d0b18d8f3ec3600",
    ("tiny4", 200, 200, 30, False, None, None):
        "b6f0e8c131ae075614d3932ad24b6aa7af794ba05d34896a15f04748575dfd54",
    ("tiny8", 3, 500, 3, True, None, None):
        "5ed82f8bdf5ccc029920dcf03e5904bead0d93b3c9eed610c58b5d1ea7ccfc01",
    ("tiny8", 3, 500, 3, False, None, None):
        "9b82f4ae74465fb680313e994a84afc31f64fda68ae60f33c52d99b9e0794978",
    ("tiny8", 33, 384, 9, True, None, None):
        "37ad3088fb64cd2f7712715e90fc1a6c08c11f9b2bcf617cdb0c290279e9bcef",
    ("tiny8", 33, 384, 9, False, None, None):
        "533329d8b6e6a9742178132c23c045731d3c0e0734ee6095d50b630b3bf084e5",
    ("tiny8", 384, 7, 1, True, None, None):
        "0d2824192a6b6f17a3c67a7b13ffbb9c441a7021a0b6d71cb1aca4b418da801d",
    ("tiny8", 384, 7, 1, False, None, None):
        "3020c13d5f95e76be569d64b85d6b6b800e64f4f21119e40e217fca8b2db1a92",
    ("8x8", 100, 200, 50, True, (1000, 2000), (512, 512)):
        "7ac2c642151e805502049f12012f455ffac66af7e150b4b7f72458d2da22951d",
    ("8x8", 100, 200, 50, False, (1000, 2000), (512, 512)):
        "7efc61723270e21e8ede76049af570ddac5f334d423aaf0f4eec41517e7b30ab",
    ("8x8", 64, 64, 64, True, (2048, 1024), (0, 256)):
        "00ce1d5cc4dd950b5578d1606a7ed4f43b490a29ca69a5adbd03f3967a380c30",
    ("8x8", 64, 64, 64, False, (2048, 1024), (0, 256)):
        "d5ff607dbca188c45d95a305734faa879128e44dc79911990faf2c8b68b18be2",
    ("4x4", 33, 40, 17, True, (100, 900), (10, 300)):
        "7b0c0b1cee87a295263b76c71a468b449a7da9b0ce30860e43d13c12655e7b9c",
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
    "a595d1a3f011c26aa7dd14c1a9d9300678f45af14eaf52b3865de412765371d4",
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
