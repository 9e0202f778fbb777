"""The README's Python example runs as written (on the functional model)."""

import re
from pathlib import Path


def test_readme_python_example_runs():
    text = (Path(__file__).parents[2] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "README has no Python example"
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {})
