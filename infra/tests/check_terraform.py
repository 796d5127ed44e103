"""Static checks of infra/terraform that need no Terraform binary.

- every .tf file parses (python-hcl2);
- every module and env has main.tf, variables.tf, outputs.tf, versions.tf and a README.md;
- versions.tf pins Terraform (>= 1.6) and the AWS provider (>= 5.40, < 6.0);
- every variable has a description and a type, every module validates some of its inputs,
  every output has a description;
- each module's README names every one of its variables and outputs (so the tables there
  cannot fall behind);
- every templatefile() a module calls exists.

Prints one line per check and a closing `N passed, M failed`; exits 1 on any failure.
"""

from __future__ import annotations

import pathlib
import re
import sys

import hcl2

TERRAFORM = pathlib.Path(__file__).resolve().parent.parent / "terraform"
REQUIRED_FILES = ["main.tf", "variables.tf", "outputs.tf", "versions.tf", "README.md"]
TERRAFORM_VERSION = ">= 1.6"
AWS_VERSION = ">= 5.40, < 6.0"

passed = 0
failed = 0


def ok(what: str) -> None:
    global passed
    passed += 1
    print(f"  ok    {what}")


def fail(what: str, detail: str = "") -> None:
    global failed
    failed += 1
    print(f"  FAIL  {what}")
    if detail:
        for line in detail.strip().splitlines()[:20]:
            print(f"        {line}")


def unquote(v):
    if isinstance(v, str) and len(v) >= 2 and v[0] == v[-1] == '"':
        return v[1:-1]
    return v


def load(path: pathlib.Path):
    with open(path, encoding="utf-8") as f:
        return hcl2.load(f)


def check_dir(d: pathlib.Path, is_module: bool) -> None:
    rel = d.relative_to(TERRAFORM)
    missing = [f for f in REQUIRED_FILES if not (d / f).exists()]
    if missing:
        fail(f"{rel} has {', '.join(REQUIRED_FILES)}", f"missing: {', '.join(missing)}")
        return
    ok(f"{rel} has {', '.join(REQUIRED_FILES)}")

    versions = load(d / "versions.tf")
    tf = versions.get("terraform", [{}])[0]
    required_version = unquote(tf.get("required_version"))
    providers = tf.get("required_providers", [{}])[0]
    aws = providers.get("aws", {})
    aws_version = unquote(aws.get("version")) if isinstance(aws, dict) else None
    aws_source = unquote(aws.get("source")) if isinstance(aws, dict) else None
    if required_version == TERRAFORM_VERSION and aws_version == AWS_VERSION and aws_source == "hashicorp/aws":
        ok(f"{rel}/versions.tf pins terraform {TERRAFORM_VERSION} and hashicorp/aws {AWS_VERSION}")
    else:
        fail(
            f"{rel}/versions.tf pins terraform {TERRAFORM_VERSION} and hashicorp/aws {AWS_VERSION}",
            f"got terraform {required_version!r}, aws {aws_source!r} {aws_version!r}",
        )

    variables = {}
    for block in load(d / "variables.tf").get("variable", []):
        for name, body in block.items():
            variables[unquote(name)] = body
    bad = [n for n, b in variables.items() if not unquote(b.get("description", "")) or "type" not in b]
    if bad:
        fail(f"{rel}: every variable has a description and a type", "missing on: " + ", ".join(bad))
    else:
        ok(f"{rel}: {len(variables)} variables, each with a description and a type")
    validated = [n for n, b in variables.items() if b.get("validation")]
    if is_module:
        if validated:
            ok(f"{rel}: {len(validated)} of {len(variables)} variables validated")
        else:
            fail(f"{rel}: variables are validated", "no validation block")

    outputs = {}
    for block in load(d / "outputs.tf").get("output", []):
        for name, body in block.items():
            outputs[unquote(name)] = body
    bad = [n for n, b in outputs.items() if not unquote(b.get("description", ""))]
    if not outputs or bad:
        fail(f"{rel}: outputs exist and are described", "missing description on: " + ", ".join(bad))
    else:
        ok(f"{rel}: {len(outputs)} outputs, each with a description")

    if is_module:
        readme = (d / "README.md").read_text(encoding="utf-8")
        absent = [f"variable {n}" for n in variables if f"`{n}`" not in readme]
        absent += [f"output {n}" for n in outputs if f"`{n}`" not in readme]
        if absent:
            fail(f"{rel}/README.md names every input and output (as `name`)", "absent: " + ", ".join(absent))
        else:
            ok(f"{rel}/README.md names all {len(variables)} inputs and {len(outputs)} outputs")

    for tf_file in d.glob("*.tf"):
        text = tf_file.read_text(encoding="utf-8")
        for m in re.finditer(r'templatefile\("\$\{path\.module\}/([^"]+)"', text):
            if (d / m.group(1)).exists():
                ok(f"{rel}: template {m.group(1)} exists")
            else:
                fail(f"{rel}: template {m.group(1)} exists")
        for m in re.finditer(r'source\s*=\s*"(\.\.?/[^"]+)"', text):
            if (d / m.group(1)).resolve().is_dir():
                ok(f"{rel}: module source {m.group(1)} exists")
            else:
                fail(f"{rel}: module source {m.group(1)} exists")


def main() -> int:
    print(f"terraform static checks: {TERRAFORM}")
    files = sorted(TERRAFORM.rglob("*.tf"))
    for f in files:
        try:
            load(f)
        except Exception as e:  # the parser raises several kinds
            fail(f"{f.relative_to(TERRAFORM)} parses", str(e))
    if files and not failed:
        ok(f"all {len(files)} .tf files parse (python-hcl2)")
    elif not files:
        fail("there are .tf files to check")
    modules = sorted(p for p in (TERRAFORM / "modules").iterdir() if p.is_dir())
    envs = sorted(p for p in (TERRAFORM / "envs").iterdir() if p.is_dir())
    if not modules or not envs:
        fail("infra/terraform has modules/ and envs/")
    for d in modules:
        check_dir(d, is_module=True)
    for d in envs:
        check_dir(d, is_module=False)
    print(f"terraform: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
