"""Renders the strata config templates (`strata.toml.tftpl`) outside Terraform.

Terraform's `templatefile` is not available here, so this implements the small subset the
config templates are allowed to use, and refuses anything else (a template that needs more
would no longer be checked the same way Terraform renders it):

- `${name}`: a variable (strings as is, numbers as numbers, booleans as true/false);
- `$${`: a literal `${`;
- directives on their own line: `%{ if name ~}`, `%{ if name != "" ~}`,
  `%{ if name == "text" ~}`, `%{ else ~}`, `%{ endif ~}` (the whole line is dropped, as
  the `~` strip markers make Terraform do).

Used by infra/tests/check_settings.py (the drift test) and infra/dev-cluster.sh (the local
cluster runs the very configs the Terraform modules render).

`boot()` then does what the node's user data does at boot (modules/strata-node/templates/
user-data.sh.tftpl): it replaces the placeholders `{{instance_id}}` and `{{private_ip}}`
with the instance's values, and refuses any other `{{...}}`.
"""

from __future__ import annotations

import json
import re
import sys

_INTERP = re.compile(r"(?<!\$)\$\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}")
_ANY_INTERP = re.compile(r"(?<!\$)\$\{")
_DIRECTIVE = re.compile(r"^\s*%\{~?\s*(.*?)\s*~?\}\s*$")
_IF = re.compile(r'^if\s+([A-Za-z_][A-Za-z0-9_]*)(?:\s*(==|!=)\s*"([^"]*)")?$')


# Placeholders the user data fills in at boot (from IMDSv2).
BOOT_PLACEHOLDERS = ("instance_id", "private_ip")
_PLACEHOLDER = re.compile(r"\{\{([^}]*)\}\}")


class TemplateError(Exception):
    """The template uses something outside the supported subset, or a variable is missing."""


def _value(name: str, variables: dict) -> object:
    if name not in variables:
        raise TemplateError(f"variable {name!r} is not set")
    return variables[name]


def _text(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float, str)):
        return str(v)
    raise TemplateError(f"cannot interpolate {v!r}")


def _truth(cond: str, variables: dict) -> bool:
    m = _IF.match(cond)
    if not m:
        raise TemplateError(f"unsupported directive %{{ {cond} }}")
    name, op, literal = m.groups()
    v = _value(name, variables)
    if op is None:
        if not isinstance(v, bool):
            raise TemplateError(f"%{{ if {name} }} needs a boolean, got {v!r}")
        return v
    return (_text(v) == literal) == (op == "==")


def render(text: str, variables: dict) -> str:
    """Renders `text` with `variables`; raises TemplateError outside the subset."""
    out: list[str] = []
    # Stack of (this branch active, some branch taken) for nested ifs.
    stack: list[tuple[bool, bool]] = []
    for lineno, line in enumerate(text.splitlines(keepends=True), 1):
        active = all(a for a, _ in stack)
        d = _DIRECTIVE.match(line)
        if d:
            body = d.group(1)
            if body.startswith("if "):
                t = _truth(body, variables) if active else False
                stack.append((t, t))
            elif body == "else":
                if not stack:
                    raise TemplateError(f"line {lineno}: else without if")
                _, taken = stack.pop()
                stack.append((not taken, True))
            elif body == "endif":
                if not stack:
                    raise TemplateError(f"line {lineno}: endif without if")
                stack.pop()
            else:
                raise TemplateError(f"line {lineno}: unsupported directive %{{ {body} }}")
            continue
        if "%{" in line:
            raise TemplateError(f"line {lineno}: directives must stand on their own line")
        if not active:
            continue
        rendered = _INTERP.sub(lambda m: _text(_value(m.group(1), variables)), line)
        if _ANY_INTERP.search(rendered):
            raise TemplateError(f"line {lineno}: only ${{name}} interpolations are supported")
        out.append(rendered.replace("$${", "${"))
    if stack:
        raise TemplateError("unterminated %{ if }")
    return "".join(out)


def boot(text: str, values: dict) -> str:
    """Fills the boot placeholders as the user data does; raises TemplateError on others."""
    unknown = sorted({m for m in _PLACEHOLDER.findall(text) if m not in BOOT_PLACEHOLDERS})
    if unknown:
        raise TemplateError(f"unknown boot placeholders: {', '.join(unknown)}")
    for name in BOOT_PLACEHOLDERS:
        if "{{" + name + "}}" in text and name not in values:
            raise TemplateError(f"no value for the boot placeholder {name!r}")
    out = _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), text)
    if "{{" in out:
        raise TemplateError("a '{{' is left after filling the boot placeholders")
    return out


def main() -> int:
    if len(sys.argv) != 3:
        print("usage: tftpl.py TEMPLATE VARIABLES_JSON", file=sys.stderr)
        return 2
    with open(sys.argv[1], encoding="utf-8") as f:
        text = f.read()
    try:
        sys.stdout.write(render(text, json.loads(sys.argv[2])))
    except TemplateError as e:
        print(f"{sys.argv[1]}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
