"""Drift test: every setting the Terraform passes to `strata` is a real Strata setting.

- Template variables: the variable map each role module's main.tf passes to
  templatefile() for its `templates/strata.toml.tftpl` (parsed with python-hcl2) must have
  exactly the keys of that role's fixture in config-vars.json (plus the ones the checker
  derives, DERIVED), so a variable added to or removed from one side only fails here
  instead of rendering the fixture's idea of the template.
- Config files: each role module's `templates/strata.toml.tftpl` is rendered (infra/tools/
  tftpl.py, every `%{ if }` branch through the variants in config-vars.json, module variable
  defaults winning over the fixture), its boot placeholders filled as the user data does
  (`{{instance_id}}`, `{{private_ip}}`), and handed to `strata config --role ROLE --config
  FILE`, which fails on an unknown key or a mistyped value. Every key of the file must then
  appear with the same value in the effective configuration it prints. The user data must
  fill every placeholder the renderer knows, and the cluster's renew interval must be at
  most half its lease (strata checks that only when the ingest node joins).
- Environment: every `STRATA_*` name in infra/ (systemd units, module inputs, the dev
  cluster script) is set for one `strata config` run; strata only *warns* about unknown
  names, so the run's stderr is searched for that warning. Values written as literals in
  HCL maps (`STRATA_X = "v"`) are used as given, so their types are checked too.
- Self-tests: a bogus key, a mistyped value, a bogus variable and a template variable map
  that differs from the fixture must each be caught, so this check cannot pass by checking
  nothing.

Prints one line per check and a closing `N passed, M failed`; exits 1 on any failure.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import tomllib

import hcl2

HERE = pathlib.Path(__file__).resolve().parent
INFRA = HERE.parent
TERRAFORM = INFRA / "terraform"
sys.path.insert(0, str(INFRA / "tools"))
import tftpl  # noqa: E402

# strata's own warning for a STRATA_* variable that names no setting
# (services/strata/src/main.rs, Settings::load).
UNKNOWN_VAR_WARNING = "variable names no setting"
ENV_TOKEN = re.compile(r"\bSTRATA_[A-Z0-9_]*[A-Z0-9]\b")
# Names in infra/ that are not settings on purpose: read by strata elsewhere (config.rs
# OTHER_VARS) or by the scripts.
NOT_SETTINGS = {
    "STRATA_CONFIG": "the config file path (config.rs OTHER_VARS)",
    "STRATA_API_KEY": "the strata sql client's key (config.rs OTHER_VARS)",
    "STRATA_CACHE": "the CI cache directory (ci/env.sh; config.rs OTHER_VARS)",
    "STRATA_BIN": "which strata binary the infra scripts run",
    "STRATA_DEV_DIR": "state directory of infra/dev-cluster.sh",
    "STRATA_DEV_INGEST_NODES": "ingest count of infra/dev-cluster.sh",
    "STRATA_DEV_COMPACTORS": "compactor count of infra/dev-cluster.sh",
    "STRATA_DEV_BUCKET": "bucket of infra/dev-cluster.sh",
    "STRATA_DEV_PORT_BASE": "first port of infra/dev-cluster.sh",
    "STRATA_DEV_ROOT_PREFIX": "engine.root_prefix of infra/dev-cluster.sh (rendered into the configs)",
    "STRATA_TEST_S3_ENDPOINT": "the LocalStack endpoint (ci/env.sh; STRATA_TEST_* are ignored by strata)",
    "STRATA_TEST_S3_BUCKET": "the CI test bucket (ci/env.sh)",
}


class Checks:
    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0

    def ok(self, what: str) -> None:
        self.passed += 1
        print(f"  ok    {what}")

    def fail(self, what: str, detail: str = "") -> None:
        self.failed += 1
        print(f"  FAIL  {what}")
        for line in detail.strip().splitlines()[:20]:
            print(f"        {line}")


def strata_binary() -> pathlib.Path:
    candidates = []
    if os.environ.get("STRATA_BIN"):
        candidates.append(pathlib.Path(os.environ["STRATA_BIN"]))
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(
        os.environ.get("STRATA_CACHE", os.path.expanduser("~/.cache/strata")), "target"
    )
    candidates.append(pathlib.Path(target) / "debug" / "strata")
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    sys.exit(
        "no strata binary: build it (cargo build -p strata) or set STRATA_BIN; looked at "
        + ", ".join(map(str, candidates))
    )


def run_config(binary, role, config=None, env=None):
    cmd = [str(binary), "config", "--role", role]
    if config is not None:
        cmd += ["--config", str(config)]
    # A clean environment: no STRATA_* of the caller leaks into the check.
    base = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_") and k != "RUST_LOG"}
    base.update(env or {})
    p = subprocess.run(cmd, capture_output=True, text=True, env=base, timeout=60)
    return p.returncode, p.stdout, p.stderr


def flatten(table: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in table.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, path + "."))
        else:
            out[path] = v
    return out


def unquote(v):
    if isinstance(v, str) and len(v) >= 2 and v[0] == v[-1] == '"':
        return v[1:-1]
    return v


# Template variables a module computes from its inputs rather than takes as one
# (modules/ingest/main.tf: cluster_renew_ms = floor(var.cluster_lease_ms / 5)).
DERIVED = {
    "ingest": {"cluster_renew_ms": lambda v: v["cluster_lease_ms"] // 5},
}
USER_DATA = TERRAFORM / "modules" / "strata-node" / "templates" / "user-data.sh.tftpl"


def module_defaults(module_dir: pathlib.Path) -> dict:
    """Defaults of the module's variables that are literals (no expressions)."""
    out = {}
    path = module_dir / "variables.tf"
    if not path.exists():
        return out
    with open(path, encoding="utf-8") as f:
        doc = hcl2.load(f)
    for block in doc.get("variable", []):
        for name, body in block.items():
            name = unquote(name)
            if "default" in body:
                v = unquote(body["default"])
                if isinstance(v, (int, float, bool)) or (isinstance(v, str) and "${" not in v):
                    out[name] = v
    return out


TEMPLATE = "templates/strata.toml.tftpl"
CLOSING = {"(": ")", "[": "]", "{": "}"}
KEY = re.compile(r'"([^"]+)"|([A-Za-z_][A-Za-z0-9_-]*)')


def skip_string(text: str, i: int) -> int:
    """text[i] opens a string literal; the index after it (interpolations may nest)."""
    i += 1
    while text[i] != '"':
        if text[i] == "\\":
            i += 2
        elif text.startswith("${", i) or text.startswith("%{", i):
            i = skip_nested(text, i + 2, "}")
        else:
            i += 1
    return i + 1


def skip_nested(text: str, i: int, close: str) -> int:
    """The index after the `close` that ends the bracket whose content starts at text[i]."""
    while text[i] != close:
        if text[i] == '"':
            i = skip_string(text, i)
        elif text[i] in CLOSING:
            i = skip_nested(text, i + 1, CLOSING[text[i]])
        else:
            i += 1
    return i + 1


def object_keys(text: str, start: int) -> list:
    """Keys of the HCL object literal `{ k = v, ... }` that opens at text[start]."""
    if text[start] != "{":
        raise ValueError(f"no object literal at {text[start:start + 40]!r}")
    keys, i = [], start + 1
    while True:
        while text[i] in " \t\r\n,":
            i += 1
        if text[i] == "}":
            return keys
        m = KEY.match(text, i)
        if not m:
            raise ValueError(f"no key at {text[i:i + 40]!r}")
        keys.append(m.group(1) or m.group(2))
        i = m.end()
        while text[i] in " \t":
            i += 1
        if text[i] not in "=:":
            raise ValueError(f"no = after key {keys[-1]!r}")
        i += 1
        while text[i] not in ",\n}":
            if text[i] == '"':
                i = skip_string(text, i)
            elif text[i] in CLOSING:
                i = skip_nested(text, i + 1, CLOSING[text[i]])
            else:
                i += 1


def templatefile_keys(expression: str, template: str = TEMPLATE):
    """Keys of the variable map of templatefile(".../<template>", {...}) in an HCL
    expression (as python-hcl2 prints it); None when it does not call it."""
    for m in re.finditer(r"templatefile\(\s*", expression):
        i = m.end()
        if expression[i] != '"':
            continue
        end = skip_string(expression, i)
        if not expression[i:end].rstrip('"').endswith(template):
            continue
        i = end
        while expression[i] in " \t\r\n,":
            i += 1
        return object_keys(expression, i)
    return None


def module_template_keys(module_dir: pathlib.Path):
    """The keys main.tf passes to templatefile() for the module's config template."""

    def walk(node):
        if isinstance(node, str):
            keys = templatefile_keys(node)
            if keys is not None:
                yield keys
        elif isinstance(node, dict):
            for v in node.values():
                yield from walk(v)
        elif isinstance(node, list):
            for v in node:
                yield from walk(v)

    with open(module_dir / "main.tf", encoding="utf-8") as f:
        found = list(walk(hcl2.load(f)))
    if len(found) != 1:
        raise ValueError(f"{len(found)} templatefile() calls of {TEMPLATE} in {module_dir.name}/main.tf (expected 1)")
    return found[0]


def compare_template_keys(role: str, module_keys, fixture_variants) -> list:
    """Problems between the module's template variable map and the role's fixture."""
    problems = []
    derived = set(DERIVED.get(role, {}))
    base = set(fixture_variants[0])
    fixture = base | derived
    module = set(module_keys)
    if len(module_keys) != len(module):
        problems.append(f"main.tf passes a key twice: {sorted(k for k in module if module_keys.count(k) > 1)}")
    if module - fixture:
        problems.append(f"passed by main.tf, missing from config-vars.json[{role!r}][0]: {sorted(module - fixture)}")
    if fixture - module:
        problems.append(f"in config-vars.json[{role!r}][0] (or DERIVED), not passed by main.tf: {sorted(fixture - module)}")
    if base & derived:
        problems.append(f"both in the fixture and derived by the checker: {sorted(base & derived)}")
    for n, variant in enumerate(fixture_variants[1:], start=2):
        if set(variant) - base:
            problems.append(f"variant {n} sets keys the first variant lacks: {sorted(set(variant) - base)}")
    return problems


def check_template_keys(checks: Checks) -> None:
    fixture = json.loads((HERE / "config-vars.json").read_text(encoding="utf-8"))
    roles = {tpl.parent.parent.name for tpl in TERRAFORM.glob(f"modules/*/{TEMPLATE}")}
    stale = sorted(k for k in fixture if not k.startswith("_") and k not in roles)
    if stale:
        checks.fail("config-vars.json has a fixture only for modules with a config template", f"no template: {stale}")
    for role in sorted(roles):
        module_dir = TERRAFORM / "modules" / role
        what = f"{role}: the templatefile() variables of modules/{role}/main.tf = config-vars.json[{role!r}] keys"
        if role not in fixture:
            checks.fail(what, "no fixture")
            continue
        try:
            keys = module_template_keys(module_dir)
        except (ValueError, IndexError) as e:
            checks.fail(what, f"cannot read the variable map: {e}")
            continue
        problems = compare_template_keys(role, keys, fixture[role])
        if problems:
            checks.fail(what, "\n".join(problems))
        else:
            checks.ok(f"{what} ({len(keys)} variables)")


def check_templates(binary, checks: Checks) -> None:
    fixture = json.loads((HERE / "config-vars.json").read_text(encoding="utf-8"))
    templates = sorted(TERRAFORM.glob("modules/*/templates/strata.toml.tftpl"))
    if not templates:
        checks.fail("config templates found under infra/terraform/modules/*/templates")
        return
    for tpl in templates:
        module_dir = tpl.parent.parent
        role = module_dir.name
        if role not in fixture:
            checks.fail(f"{role}: variables for {tpl.relative_to(INFRA)} in config-vars.json")
            continue
        defaults = module_defaults(module_dir)
        base = dict(fixture[role][0])
        for name in base:
            if name in defaults:
                base[name] = defaults[name]
        for i, variant in enumerate(fixture[role]):
            variables = dict(base)
            variables.update(variant if i else {})
            for name, f in DERIVED.get(role, {}).items():
                variables[name] = f(variables)
            what = f"{role}: {tpl.relative_to(INFRA)} (variant {i + 1}) is accepted by strata config --role {role}"
            try:
                text = tftpl.render(tpl.read_text(encoding="utf-8"), variables)
                text = tftpl.boot(text, fixture["_boot"])
            except tftpl.TemplateError as e:
                checks.fail(what, f"render: {e}")
                continue
            try:
                written = flatten(tomllib.loads(text))
            except tomllib.TOMLDecodeError as e:
                checks.fail(what, f"rendered TOML does not parse: {e}\n{text}")
                continue
            with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
                f.write(text)
            try:
                rc, out, err = run_config(binary, role, config=f.name)
            finally:
                os.unlink(f.name)
            if rc != 0:
                checks.fail(what, err)
                continue
            effective = flatten(tomllib.loads(out))
            mismatched = [
                f"{k}: file {v!r}, effective {effective.get(k)!r}"
                for k, v in written.items()
                if effective.get(k) != v
            ]
            if mismatched:
                checks.fail(what, "settings not taken as written:\n" + "\n".join(mismatched))
            else:
                checks.ok(f"{what} ({len(written)} settings)")
            if effective.get("cluster.enabled") and role == "ingest":
                lease, renew = effective.get("cluster.lease_ms", 0), effective.get("cluster.renew_ms", 0)
                what = f"{role} (variant {i + 1}): cluster.renew_ms ({renew}) is positive and at most half of cluster.lease_ms ({lease})"
                if 0 < renew and renew * 2 <= lease:
                    checks.ok(what)
                else:
                    checks.fail(what, "strata ingest would refuse to join the cluster")


def check_boot_placeholders(checks: Checks) -> None:
    """The user data fills in every placeholder tftpl.boot() knows (and so the templates use)."""
    text = USER_DATA.read_text(encoding="utf-8")
    for name in tftpl.BOOT_PLACEHOLDERS:
        what = f"{USER_DATA.relative_to(INFRA)} fills the boot placeholder {{{{{name}}}}}"
        if re.search(r"s/\{\{" + name + r"\}\}/", text):
            checks.ok(what)
        else:
            checks.fail(what, "no sed substitution for it: nodes would boot with the placeholder in their config")


def hcl_env_literals() -> dict:
    """STRATA_* keys of maps in the .tf files with their literal values."""
    found = {}

    def walk(node):
        if isinstance(node, dict):
            for k, v in node.items():
                key = unquote(k) if isinstance(k, str) else k
                if isinstance(key, str) and ENV_TOKEN.fullmatch(key) and isinstance(v, (str, int, float, bool)):
                    v = unquote(v)
                    if not (isinstance(v, str) and "${" in v):
                        found[key] = str(v).lower() if isinstance(v, bool) else str(v)
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    for path in TERRAFORM.rglob("*.tf"):
        with open(path, encoding="utf-8") as f:
            walk(hcl2.load(f))
    return found


def env_names() -> dict:
    """Every STRATA_* name in infra/ -> the files it appears in."""
    names: dict = {}
    files = [p for p in INFRA.rglob("*") if p.is_file() and p.suffix in {".tf", ".tftpl", ".sh", ".tfvars", ".example"}]
    for p in files:
        for name in ENV_TOKEN.findall(p.read_text(encoding="utf-8")):
            names.setdefault(name, set()).add(str(p.relative_to(INFRA)))
    return names


def check_env(binary, checks: Checks) -> None:
    rc, out, err = run_config(binary, "ingest")
    if rc != 0:
        checks.fail("strata config --role ingest runs", err)
        return
    defaults = flatten(tomllib.loads(out))
    by_env = {"STRATA_" + k.replace(".", "_").upper(): v for k, v in defaults.items()}
    literals = hcl_env_literals()
    names = env_names()
    if not names:
        checks.fail("STRATA_* names found in infra/")
        return
    env = {}
    for name in names:
        if name in NOT_SETTINGS:
            continue
        if name in literals:
            env[name] = literals[name]
        elif name in by_env:
            v = by_env[name]
            env[name] = str(v).lower() if isinstance(v, bool) else str(v)
        else:
            env[name] = "1"
    rc, out, err = run_config(binary, "ingest", env=env)
    if rc != 0:
        checks.fail("STRATA_* values in infra/ are accepted by strata", err)
        return
    effective_by_env = {"STRATA_" + k.replace(".", "_").upper(): v for k, v in flatten(tomllib.loads(out)).items()}
    for name in sorted(names):
        where = ", ".join(sorted(names[name]))
        if name in NOT_SETTINGS:
            checks.ok(f"{name} ({where}): not a setting on purpose: {NOT_SETTINGS[name]}")
        elif re.search(rf"{UNKNOWN_VAR_WARNING}.*\b{name}\b|\b{name}\b.*{UNKNOWN_VAR_WARNING}", err):
            checks.fail(f"{name} ({where}) is a strata setting", f"strata warns: {name} names no setting")
        elif name in literals:
            got = effective_by_env.get(name)
            got = str(got).lower() if isinstance(got, bool) else str(got)
            if got == literals[name]:
                checks.ok(f"{name} ({where}) is a strata setting; value {literals[name]!r} taken")
            else:
                checks.fail(f"{name} ({where}) value {literals[name]!r} taken", f"effective value: {got!r}")
        else:
            checks.ok(f"{name} ({where}) is a strata setting")


def self_test(binary, checks: Checks) -> None:
    """The checks above must be able to fail."""
    cases = [
        ("[engine]\nnot_a_real_setting = 1\n", "a bogus key"),
        ('[engine]\nlevels = "many"\n', "a mistyped value"),
        ('[store]\nkind = "s3"\n', "store.kind = s3 without a bucket"),
    ]
    for text, what in cases:
        with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
            f.write(text)
        try:
            rc, _, err = run_config(binary, "ingest", config=f.name)
        finally:
            os.unlink(f.name)
        if rc == 0:
            checks.fail(f"self-test: strata config rejects {what}", "it was accepted: the template check proves nothing")
        else:
            checks.ok(f"self-test: strata config rejects {what}")
    rc, _, err = run_config(binary, "ingest", env={"STRATA_NOT_A_REAL_SETTING": "1"})
    if rc == 0 and UNKNOWN_VAR_WARNING in err and "STRATA_NOT_A_REAL_SETTING" in err:
        checks.ok("self-test: an unknown STRATA_* variable is reported")
    else:
        checks.fail(
            "self-test: an unknown STRATA_* variable is reported",
            f"no {UNKNOWN_VAR_WARNING!r} warning (rc {rc}): the environment check proves nothing\n{err}",
        )
    keys = templatefile_keys(
        'x = "${templatefile("${path.module}/templates/strata.toml.tftpl", {a = var.a, "b" = "${var.x}-{y}", '
        'c = floor(var.c / 5), d = { e = 1 }, f = [1, 2]})}"'
    )
    if keys == ["a", "b", "c", "d", "f"]:
        checks.ok("self-test: the templatefile() variable map is read (quoted keys, nested values)")
    else:
        checks.fail("self-test: the templatefile() variable map is read (quoted keys, nested values)", f"got {keys}")
    if compare_template_keys("query", ["a", "b"], [{"a": 1}]) and compare_template_keys("query", ["a"], [{"a": 1, "b": 2}]):
        checks.ok("self-test: a template variable missing from either side is caught")
    else:
        checks.fail("self-test: a template variable missing from either side is caught", "not caught")
    try:
        tftpl.render("a = ${missing}\n", {})
        checks.fail("self-test: the template renderer refuses a missing variable")
    except tftpl.TemplateError:
        checks.ok("self-test: the template renderer refuses a missing variable")
    try:
        tftpl.boot('node = "{{hostname}}"\n', {"instance_id": "i-1", "private_ip": "10.0.0.1"})
        checks.fail("self-test: the boot filler refuses an unknown placeholder")
    except tftpl.TemplateError:
        checks.ok("self-test: the boot filler refuses an unknown placeholder")


def main() -> int:
    binary = strata_binary()
    print(f"drift test: Terraform settings against {binary}")
    checks = Checks()
    self_test(binary, checks)
    check_template_keys(checks)
    check_templates(binary, checks)
    check_boot_placeholders(checks)
    check_env(binary, checks)
    print(f"settings: {checks.passed} passed, {checks.failed} failed")
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
