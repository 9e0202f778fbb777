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
(``LinearPlan.p_steps``). The serialized plans' streams are unchanged. The planner's cycle
estimate (``LinearPlan.est_cycles``) is left out of the digest: it follows the engine timing,
and the stream is what must not change."""

import hashlib
import json
import re
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
    text = re.sub(r", est_cycles=\d+", "", text)   # the planner's estimate, not the stream
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
        "402338e6ec3a5aaa7b641a8267d730512828288e69c49d4efb569325aa580582",
    ("16x16", 64, 64, 64, False, None, None):
        "8d609d26f6c0ed0a7634696fa5b7bc2e1cc473c4f43fb4394485c8b845365203",
    ("16x16", 128, 128, 128, True, None, None):
        "000d1bca0a271139c85a725e37757d39b1bbd0f9834be24b79c5d54096e7b063",
    ("16x16", 128, 128, 128, False, None, None):
        "6b4c955f6dcea3e53dae5e3828c9f438e2a07f65ebac0b8e5ad0d3145ef690d1",
    ("16x16", 256, 256, 256, True, None, None):
        "4c7cf2c4752bc299b54431c7940be6d4e79ac361f521bf5e3872ee11719f3b75",
    ("16x16", 256, 256, 256, False, None, None):
        "eb285112b2cf6edc5fb9a4fd25380b8d1cf202748f48ba7a9d03e898a16fe7c9",
    ("16x16", 512, 512, 512, True, None, None):
        "974de803d4c5939d594a9084706e93cb6e80e8ac366df7042503d733118db069",
    ("16x16", 512, 512, 512, False, None, None):
        "c4c33da820f2d0bc6a523bb6e0f3d3c1cc78e548d832d5b0af88c92d8cf46543",
    ("16x16", 1000, 1000, 40, True, None, None):
        "c33a1657f7ecd640e8b7ce7a92b69911aa583a3c8b11e587b8216d8dfa5a661e",
    ("16x16", 1000, 1000, 40, False, None, None):
        "3e95c5b4c3babe37906a23e8b740d19616261a6ea30c85c65cab54a5e0b789a1",
    ("32x32", 100, 300, 200, True, None, None):
        "806f9c5c8d58eae53f565870fdf0a344969aab33597806f5eb194486e6d97189",
    ("32x32", 100, 300, 200, False, None, None):
        "6a24fdc1e4f51212e63d44f8018af3f87e77119cacd52456fb96623383dcc1b6",
    ("4x4", 1, 7, 9, True, None, None):
        "1e1d30f96f346ec57188e946bf7bfb314f87018148b4d7e9e9ac0d8d3edeb3b1",
    ("4x4", 1, 7, 9, False, None, None):
        "06eb46262d774ace5d7ef887663b3cc28c3d1ab949a4ddcb8bd30a54d0993874",
    ("4x4", 7, 9, 384, True, None, None):
        "0d75b0ef67de7cf463adad371ce6d4a3a53f6edd7c79fddea291786d0ec9e8ee",
    ("4x4", 7, 9, 384, False, None, None):
        "294e152d5f491d97a51ce1d31bed15b3295a229d0eee00490e400c904aebb514",
    ("4x4", 9, 8, 33, True, None, None):
        "6bd53f8ed1200e116bdfba6be6773d2600cd0dd19629cf9254a66d48143bfaa4",
    ("4x4", 9, 8, 33, False, None, None):
        "37f25daac8b79db78d15136e9ae24884f471d19e9cacba0ca48dad5a00657a62",
    ("4x4", 32, 384, 384, True, None, None):
        "59436acb331ab0620ce0f540b730e0a4980a3ea084e06a0bd9ac720ff63b96bd",
    ("4x4", 32, 384, 384, False, None, None):
        "e3666fbd60926b6de339a888660d5fc00ede536d924881d29a2f8ad06fe1b027",
    ("4x4", 33, 384, 8, True, None, None):
        "c223660f4eaa9c533235c2a5b1d057738f7147eac8d4a95d454d3f7820edc7b5",
    ("4x4", 33, 384, 8, False, None, None):
        "1cc0e62686d9c5856e0bbffebca1eba595b8178f218433ce9bd7f36cee04bfda",
    ("4x4", 384, 33, 7, True, None, None):
        "f4ab49e2b24b8ee882ac0b64a940197cabbbdc74484a81b94b454ee1a22467da",
    ("4x4", 384, 33, 7, False, None, None):
        "6562e92204b51e7fbfded22b2332ce39752e49df8019bd0de1af305ebeba0ed0",
    ("4x8s", 40, 30, 70, True, None, None):
        "fed4b17261d73dd610d0523ab7773d800d32a88c8dfcb18d097f0e1970213de6",
    ("4x8s", 40, 30, 70, False, None, None):
        "375a48a000d4ddf626d5d24ec9f6c8a7a0b6220bdae0368bed7e69288afc94bb",
    ("8x4", 40, 50, 30, True, None, None):
        "36569c301438d2c0bbe6bce18ba2468cb201956113d18f6e654d8b25e7880b8a",
    ("8x4", 40, 50, 30, False, None, None):
        "e0bf9f3f2fa89db6673762d7851e7f91909ecd2a4f0d7e15295e182d4146da4f",
    ("8x8", 1, 1, 1, True, None, None):
        "10432c3b3f6e900a29d4dc9741f56ccb0921a13aa1af046e98beb0f43efa8f6e",
    ("8x8", 1, 1, 1, False, None, None):
        "cdeda0334b69053517b1f8e0eeb7c064f5bc7fd144c3e184f0aed67e4081693a",
    ("8x8", 1, 384, 9, True, None, None):
        "98d762f06f9ae734e728da75856fce3ebedb269bc8e386361ec8c2710501caba",
    ("8x8", 1, 384, 9, False, None, None):
        "fd26526c2c2bd008b696cc5b74e685e60929c0d77efbf454324c2ed9bb54a66b",
    ("8x8", 7, 33, 384, True, None, None):
        "6cd41718217375d4d8d99b1f5ec879bf2cc1c0654046297a9182f9126e92a7be",
    ("8x8", 7, 33, 384, False, None, None):
        "c95991de1b4c737c7c4834f6500f2c90e6db5713d01f5bfdee4b56666bd9d521",
    ("8x8", 8, 1, 1, True, None, None):
        "c61892fbd298b1fd621f0bd3e50fdbc1e6b4d69023430ccd81a57f2ab66ff4f2",
    ("8x8", 8, 1, 1, False, None, None):
        "33cf8b3cfc7c544d1c022b3dbe51e3695c73102503348b327d04769b4221617a",
    ("8x8", 9, 384, 33, True, None, None):
        "74c38462de1f3f9ff6771f88ac9eb84e5f17f822fc6283ebdd5471c2bd07d236",
    ("8x8", 9, 384, 33, False, None, None):
        "d247d9cf91c022566f1d897ed8a6d93f448a4d65312f693eff9af4355d83226a",
    ("8x8", 32, 384, 384, True, None, None):
        "7c7ac9d064f807773e1363aa146561069db30dda503b655ae581c0b9bf76f930",
    ("8x8", 32, 384, 384, False, None, None):
        "10295cf12331d91908bc2fe33d021d0afade3b03358967af18d1be2682ff4d37",
    ("8x8", 32, 384, 1536, True, None, None):
        "79f82f69b1cc44b3e806f1a449f31f679b0b5d1c996e4175a42d81cee5d0035b",
    ("8x8", 32, 384, 1536, False, None, None):
        "6bd5236b57950c288de5aa4c9cf1752e1252679a497d378411f4218a6317e6b6",
    ("8x8", 32, 1536, 384, True, None, None):
        "a9b0a4e7efcf980d80e113853d599911797cecfc7d63c9362b01d66ef69897fb",
    ("8x8", 32, 1536, 384, False, None, None):
        "a98f8eb631d08f94c94f12fde0f99f5049ff078a47a35b203ce570c6ab20985d",
    ("8x8", 33, 9, 8, True, None, None):
        "4ba71a67e06accd3928028a38c1096a5e6e7b23c710d75dc8b30a75bfe47f4af",
    ("8x8", 33, 9, 8, False, None, None):
        "c15a7583976cf3bf3abf8e2f00704a72136b69b8954ff6a2947b9e9070869e4d",
    ("8x8", 64, 64, 64, True, None, None):
        "c143fc5d131b213603948d97e7e4604004a10c34debde9aa0e295573a6465ee9",
    ("8x8", 64, 64, 64, False, None, None):
        "9a90948264edd53604d2d98b71d2da5013fa79d16a018f0c2673eab7f33502ca",
    ("8x8", 64, 3000, 24, True, None, None):
        "3da6c5c8e0f678b4be6799b4c5ca04e003fcbef4da0f5dc4c9c43801e4fed0a3",
    ("8x8", 64, 3000, 24, False, None, None):
        "0c660ce81abf0497491e8e81f74b0b51131d49434b23e370bb94b411f30db70b",
    ("8x8", 99, 108, 6, True, None, None):
        "4ecf3161af6aeb0de612cd9a5ce89904602b9ef339497ac70838b504b1ac83fe",
    ("8x8", 99, 108, 6, False, None, None):
        "37fd737fe889a592fb25ee5a4a2e27137fbb885fa5737e488f148d60aa0ae4fd",
    ("8x8", 128, 128, 128, True, None, None):
        "5cbdac3341ecb015be00cf48ca1c6c21c5b6748a925c18e83b449b2031c0a71d",
    ("8x8", 128, 128, 128, False, None, None):
        "e93f8070f6e164b3b96423a4ccafa65aeec82882e80cffc53ca762e41f5ef7f4",
    ("8x8", 128, 384, 384, True, None, None):
        "07ea4e8873ae3431124920ab4046c68f7aaf1244caea852d49260f55b7b502e7",
    ("8x8", 128, 384, 384, False, None, None):
        "9503624bb0f6b6ae0c20f9f0705c7c9648371499cf822c96a173c28e7991cae7",
    ("8x8", 130, 36, 37, True, None, None):
        "f7d30d2a3c7420c63abd433043e0eb66380d55003137e8c18e109a0ecd000375",
    ("8x8", 130, 36, 37, False, None, None):
        "7125974e073092ec857e43283e51b8357ecf5cd4688b9b33f80f8d2515da372b",
    ("8x8", 256, 256, 256, True, None, None):
        "60946a512ec24919e24ac276196fab5b1c2b0b211b921a184eb744b2218fea5a",
    ("8x8", 256, 256, 256, False, None, None):
        "9adbb9e53b2deace55f21ac6fa3ec2fd4728d5fe073c0c38ece4a2863e109801",
    ("8x8", 384, 8, 7, True, None, None):
        "4447129581f569a738ebf140e6276fb35b7d2ff2e94d338b2cbddfe844c89e07",
    ("8x8", 384, 8, 7, False, None, None):
        "0b1521793531af684cc96862282621551210948cbc07fd0c12f7dedc3cbfc534",
    ("8x8", 512, 512, 512, True, None, None):
        "f64b8106223cd7eb2ded94e463b2e9c670072b977f77fcda07446771f3f81934",
    ("8x8", 512, 512, 512, False, None, None):
        "c3fc3d7ede9bf2ba5eb0cca70963ea34d388da553e9ab98eecd92801bf17023f",
    ("8x8", 513, 40, 40, True, None, None):
        "e03f9bc2217d2990df12008e2400eba7d145d9db6e206a98a32346a2da283ca0",
    ("8x8", 513, 40, 40, False, None, None):
        "fd997fd6d3d807f50a335f47e1f753e18db61f11f5a41d0347cacd4342f41577",
    ("8x8", 1024, 25, 17, True, None, None):
        "b5375e58a51cf84ddde889f97512bb0ddc5fe9421fd810bf54f2c6858e938f9a",
    ("8x8", 1024, 25, 17, False, None, None):
        "7245d0630cd7df71954cfa5f54a229a962f154019f0020b8ff784baa453d8767",
    ("8x8", 2000, 16, 16, True, None, None):
        "2986ab81843405e33e40c049b73d7b6482b1c9c32c461e566f78990072746457",
    ("8x8", 2000, 16, 16, False, None, None):
        "0adb316554faea48abad6d20e54dfe1a97beee547d5760051cd317f926efd4eb",
    ("8x8", 5000, 64, 8, True, None, None):
        "4e9e748e317806b6769dd54b2a45415151ad78311e7d802d68fcc4e3b4800062",
    ("8x8", 5000, 64, 8, False, None, None):
        "90bd15051ff126c84e0e250300b346973abdad3e9129de995bff92f48e8791ad",
    ("bus128", 77, 200, 50, True, None, None):
        "d959ae9b682cb38a6ffabaa54dae934dcb7dee64519ef684ffbf35b613b95179",
    ("bus128", 77, 200, 50, False, None, None):
        "5e8365015c11555c296f8396f3369a6af365a95a35a006d3bca90749af5f42ff",
    ("bus32", 77, 200, 50, True, None, None):
        "38c09e5ed4386b5b89336ddffe9ae56790e11abb57a9b64a8f552af05ba1c630",
    ("bus32", 77, 200, 50, False, None, None):
        "5e8365015c11555c296f8396f3369a6af365a95a35a006d3bca90749af5f42ff",
    ("fifo1", 70, 90, 30, True, None, None):
        "1270b9dd2dbd671ed313d6ea375607afbe797447e50d1329f83e85cf3ee72ab4",
    ("fifo1", 70, 90, 30, False, None, None):
        "4d80c1ec6f990c128daae8de12a5c6ceaeedd338854f59334a6252d4b0f96267",
    ("fifo4", 300, 100, 90, True, None, None):
        "09f37e8db633fa8edc9bc3bd23dbf90fb78cbaa72b2af5156e2cdb0e4135a2b1",
    ("fifo4", 300, 100, 90, False, None, None):
        "9f8bbb3b9bdf2e8478ff116eac3dc235b6518ea3da7e5a3af0147f4ffb8cb30d",
    ("tiny4", 33, 384, 9, True, None, None):
        "9d9ac588ef1364017fd9b949d7d47ab61260048223e4397617d505122c17ccfc",
    ("tiny4", 33, 384, 9, False, None, None):
        "64c695d728dbd441dbc98e42f84b5f57fe45a61dd4cddb297287d4a4d205a7b5",
    ("tiny4", 45, 4, 61, True, None, None):
        "1436dd0a5fdd2e3f837900538cf7e89b797f178bdc1608adf22bf00c7b65ccf5",
    ("tiny4", 45, 4, 61, False, None, None):
        "09249725a7038f325b49ecf1d6e678226c505ceaba3d3931ec67d13809312b68",
    ("tiny4", 90, 112, 24, True, None, None):
        "e4172897333155aeb731c78c61d7afcf7be56d927ab8c3679a095da57198a600",
    ("tiny4", 90, 112, 24, False, None, None):
        "8b3af56da1ce9abd9698257a5450ff5f950320bbabfb12646c8370e6bb4cea07",
    ("tiny4", 200, 200, 30, True, None, None):
        "77f33eac2458c7091e79dd106902df84213c0d55b2579f27aa47806cddbe4c1f",
    ("tiny4", 200, 200, 30, False, None, None):
        "5396343d8e52a3aa120a663418e1cc4839bd93abca5cadfd66b3f0e6e16222a0",
    ("tiny8", 3, 500, 3, True, None, None):
        "ebf9a5424e9e2a44acd2f8e3fd232666e63498caa68c5975798f0e69f1d47ae9",
    ("tiny8", 3, 500, 3, False, None, None):
        "f206a8b1f760e8ee265f829f2ad6b852b53431228928eeb9d5030b3184ce4bcc",
    ("tiny8", 33, 384, 9, True, None, None):
        "bb5ea053f960743ce994e379793c997bf1a1d61aaee35e6260ac7d92f1262b4c",
    ("tiny8", 33, 384, 9, False, None, None):
        "433f9433d3164db926aa4b470bc2ea41e4dd68ec851cd926375fd65d84e12e1b",
    ("tiny8", 384, 7, 1, True, None, None):
        "d136044d7ef87986edd152521cac5922dfe629147ba886e0192bb492f9341383",
    ("tiny8", 384, 7, 1, False, None, None):
        "5a3664a7ab112933964b6a107d606a285abf288003188276391495168449a0c4",
    ("8x8", 100, 200, 50, True, (1000, 2000), (512, 512)):
        "61d5fec9bc7827b43232d1e94337be951a900b2344665f64fd80f04d6ee03223",
    ("8x8", 100, 200, 50, False, (1000, 2000), (512, 512)):
        "52a33ffb7c4e037b78afac061cfe8d2d95324f8fe775f75552f245af61c30d9b",
    ("8x8", 64, 64, 64, True, (2048, 1024), (0, 256)):
        "f944f0def30d4f715a13620cbddfd5a8225041a0814e382fb86c4decb2804075",
    ("8x8", 64, 64, 64, False, (2048, 1024), (0, 256)):
        "488c6a397ee1b88de42850c073032fb9c0b820c73bc1ab9773d0610a3d19977c",
    ("4x4", 33, 40, 17, True, (100, 900), (10, 300)):
        "ca6e969254db76c4b491638e1b29e0ed0dabc5e2282a3ca3486ead09a019b1ed",
    ("4x4", 33, 40, 17, False, (100, 900), (10, 300)):
        "d289d7aa9742236dc827a2d71b179ecdb009cf73d1f952ce0a01d4aeb76a12b3",
}

#: digests of the FORCED tilings of test_linear, in order
FORCED_DIGESTS = [
    "cbc2055b4d41b59fc16076fd116fea8f267720c9680ba02634798a423bf0bc7c",
    "54364c53e02ad9b13071fc59c454d255271141a21331389fa23faf7d84d50499",
    "f649a7def93669adc9c5f39b846b1cff959acff6b850ebefe4041684b2b4ad41",
    "77331442d8544bc8ebf199a9d5eefab1b40a523184f64f95994f2dcb405bc04d",
    "fc12c4410ee526accaab4cd9d5fd7c5aaea52bba75f2abfc03d09e1463c99564",
    "03f1d7f1fbf365670c22a825b04bb1f3224f11160ec33b61e785efb188ea9374",
    "f2fea642630be5a053c674671f40d14a1ec884ab4746f147dd0f64d7961b34da",
    "588a482f528d68d9261a32ac169fe311d5f8bbd3d2709a3e7310bf33d62963ed",
    "cc89c2a8a0e1bd46e54038e49d8f9e1e75cf820fe7e2314e6e0a6548531da012",
    "70ebc171a76de8c2c9cd2cc07084aec9412dcf9d26128ba31154cab51271a532",
    "206635592e579208afde3ca1e83d7c7ca3a063e7098e5b3395078c343e5bb23c",
    "7d053fd9a95cfe237e909684f33d4a32360b54b51abe5320d333150980fab28b",
    "0010bec3fd80aaf743b25abacc8137db051e80721c043bb393c3d7e88f44029f",
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
