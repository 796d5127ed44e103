"""Writes the Inputs and Outputs tables of each module's README.md from its .tf files.

The tables sit between `<!-- BEGIN_TF_DOCS -->` and `<!-- END_TF_DOCS -->` (the markers
terraform-docs uses, so that tool can take over where it is installed); the prose above
them is written by hand. Run after changing variables or outputs:

    $STRATA_CACHE/infra-venv/bin/python infra/tools/readme_tables.py

infra/tests/check_terraform.py fails when a README misses an input or output.
"""

from __future__ import annotations

import json
import pathlib
import re

import hcl2

TERRAFORM = pathlib.Path(__file__).resolve().parent.parent / "terraform"
BEGIN, END = "<!-- BEGIN_TF_DOCS -->", "<!-- END_TF_DOCS -->"


def unquote(v):
    if isinstance(v, str) and len(v) >= 2 and v[0] == v[-1] == '"':
        return v[1:-1]
    return v


def cell(text: str) -> str:
    return str(text).replace("\\\"", "\"").replace("|", "\\|").replace("\n", " ")


def type_text(t) -> str:
    t = unquote(t)
    if isinstance(t, str):
        return t.removeprefix("${").removesuffix("}")
    return json.dumps(t)


def default_text(body: dict) -> str:
    if "default" not in body:
        return "required"
    v = unquote(body["default"])
    if v is None:
        return "`null`"
    if isinstance(v, str):
        return f'`"{v}"`'
    if isinstance(v, bool):
        return f"`{str(v).lower()}`"
    if isinstance(v, (list, dict)):
        return f"`{json.dumps(v)}`"
    return f"`{v}`"


def tables(d: pathlib.Path) -> str:
    with open(d / "variables.tf", encoding="utf-8") as f:
        variables = [(unquote(n), b) for block in hcl2.load(f).get("variable", []) for n, b in block.items()]
    with open(d / "outputs.tf", encoding="utf-8") as f:
        outputs = [(unquote(n), b) for block in hcl2.load(f).get("output", []) for n, b in block.items()]
    lines = ["## Inputs", "", "| name | type | default | description |", "|---|---|---|---|"]
    for name, body in variables:
        lines.append(
            f"| `{name}` | `{cell(type_text(body.get('type', 'any')))}` | {cell(default_text(body))} | {cell(unquote(body.get('description', '')))} |"
        )
    lines += ["", "## Outputs", "", "| name | description |", "|---|---|"]
    for name, body in outputs:
        lines.append(f"| `{name}` | {cell(unquote(body.get('description', '')))} |")
    return "\n".join(lines)


def main() -> None:
    for d in sorted(p for p in (TERRAFORM / "modules").iterdir() if p.is_dir()) + sorted(
        p for p in (TERRAFORM / "envs").iterdir() if p.is_dir()
    ):
        readme = d / "README.md"
        text = readme.read_text(encoding="utf-8") if readme.exists() else f"# {d.name}\n\n"
        block = f"{BEGIN}\n{tables(d)}\n{END}"
        if BEGIN in text:
            text = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: block, text, flags=re.S)
        else:
            text = text.rstrip("\n") + "\n\n" + block + "\n"
        readme.write_text(text, encoding="utf-8")
        print(f"wrote {readme.relative_to(TERRAFORM.parent.parent)}")


if __name__ == "__main__":
    main()
