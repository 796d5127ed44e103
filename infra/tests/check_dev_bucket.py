"""The dev cluster's bucket (infra/tools/dev_bucket.py) has the storage module's settings.

dev_bucket.py applies them to LocalStack as plain data (it runs with the LocalStack venv,
which has no HCL parser); this check parses infra/terraform/modules/storage/main.tf with
python-hcl2, translates what LocalStack's S3 supports into the S3 API's shapes, with every
`var.*` at its default and `var.root_prefix`/the bucket ARN as placeholders, and compares:

- the lifecycle rules of aws_s3_bucket_lifecycle_configuration.data: ids, status, filter
  prefixes and every action with its days, in order;
- the bucket policy (data.aws_iam_policy_document.data): every statement (effect, principal,
  actions, resources, conditions) is in dev_bucket.bucket_policy() as written, or named in
  dev_bucket.POLICY_NOT_LOCAL with a reason; no other statement, no stale exception;
- the public access block, the object ownership and the versioning status.

Self-tests make sure a changed day, a missing statement and an unknown exception are caught.
Prints one line per check and a closing `devbucket: N passed, M failed`; exits 1 on any
failure.
"""

from __future__ import annotations

import copy
import pathlib
import re
import sys

import hcl2

HERE = pathlib.Path(__file__).resolve().parent
INFRA = HERE.parent
STORAGE = INFRA / "terraform" / "modules" / "storage"
sys.path.insert(0, str(INFRA / "tools"))
import dev_bucket  # noqa: E402

ROOT = "ROOT_PREFIX"
BUCKET = "dev-bucket"


class Unsupported(Exception):
    """Something in the module this check cannot translate (so cannot compare)."""


def unquote(v):
    if isinstance(v, str) and len(v) >= 2 and v[0] == v[-1] == '"':
        return v[1:-1]
    return v


def load(path: pathlib.Path) -> dict:
    with open(path, encoding="utf-8") as f:
        return hcl2.load(f)


def context() -> dict:
    """Values of the expressions the storage module's bucket settings use."""
    ctx = {}
    for block in load(STORAGE / "variables.tf").get("variable", []):
        for name, body in block.items():
            if "default" in body:
                ctx[f"var.{unquote(name)}"] = unquote(body["default"])
    ctx["var.root_prefix"] = ROOT
    ctx["aws_s3_bucket.data.arn"] = f"arn:aws:s3:::{BUCKET}"
    ctx["aws_s3_bucket.data.id"] = BUCKET
    return ctx


def value(v, ctx):
    """A literal or an interpolation of known expressions; Unsupported otherwise."""
    if isinstance(v, (bool, int, float)):
        return v
    if not isinstance(v, str):
        raise Unsupported(f"value {v!r}")
    s = unquote(v)
    whole = re.fullmatch(r"\$\{([^{}]*)\}", s)
    if whole:
        expr = whole.group(1).strip()
        if expr not in ctx:
            raise Unsupported(f"expression {expr}")
        return ctx[expr]

    def sub(m):
        expr = m.group(1).strip()
        if expr not in ctx:
            raise Unsupported(f"expression {expr}")
        return str(ctx[expr])

    return re.sub(r"\$\{([^{}]*)\}", sub, s)


def block(body: dict, name: str) -> dict | None:
    """The single nested block `name` of an HCL body (None when absent)."""
    blocks = body.get(name)
    if not blocks:
        return None
    if len(blocks) != 1:
        raise Unsupported(f"{len(blocks)} {name} blocks")
    return blocks[0]


def resource(doc: dict, kind: str, name: str) -> dict:
    for r in doc.get("resource", []):
        body = r.get(f'"{kind}"', {}).get(f'"{name}"')
        if body is not None:
            return body
    raise Unsupported(f"no resource {kind}.{name}")


def data_source(doc: dict, kind: str, name: str) -> dict:
    for r in doc.get("data", []):
        body = r.get(f'"{kind}"', {}).get(f'"{name}"')
        if body is not None:
            return body
    raise Unsupported(f"no data source {kind}.{name}")


# ------------------------------------------------------------------------------------
# Lifecycle rules (aws_s3_bucket_lifecycle_configuration -> PutBucketLifecycleConfiguration)

ACTIONS = {
    "abort_incomplete_multipart_upload": ("AbortIncompleteMultipartUpload", {"days_after_initiation": "DaysAfterInitiation"}),
    "noncurrent_version_expiration": (
        "NoncurrentVersionExpiration",
        {"noncurrent_days": "NoncurrentDays", "newer_noncurrent_versions": "NewerNoncurrentVersions"},
    ),
    "expiration": ("Expiration", {"days": "Days", "date": "Date", "expired_object_delete_marker": "ExpiredObjectDeleteMarker"}),
}
RULE_KEYS = {"id", "status", "filter", "__is_block__", "__comments__"} | set(ACTIONS)


def module_lifecycle_rules(doc: dict, ctx: dict) -> list:
    body = resource(doc, "aws_s3_bucket_lifecycle_configuration", "data")
    if "dynamic" in body:
        raise Unsupported("dynamic rule blocks")
    rules = []
    for r in body.get("rule", []):
        extra = set(r) - RULE_KEYS
        if extra:
            raise Unsupported(f"rule {unquote(r.get('id'))}: {', '.join(sorted(extra))}")
        out = {"ID": value(r["id"], ctx), "Status": value(r["status"], ctx)}
        f = block(r, "filter")
        fields = {k: v for k, v in (f or {}).items() if not k.startswith("__")}
        if set(fields) - {"prefix"}:
            raise Unsupported(f"rule {out['ID']}: filter on {', '.join(sorted(fields))}")
        out["Filter"] = {"Prefix": value(fields["prefix"], ctx)} if "prefix" in fields else {}
        for hcl_name, (api_name, keys) in ACTIONS.items():
            a = block(r, hcl_name)
            if a is None:
                continue
            got = {}
            for k, v in a.items():
                if k.startswith("__"):
                    continue
                if k not in keys:
                    raise Unsupported(f"rule {out['ID']}: {hcl_name}.{k}")
                got[keys[k]] = value(v, ctx)
            out[api_name] = got
        rules.append(out)
    return rules


def compare_lifecycle(expected: list, got: list) -> list:
    problems = []
    ids_e, ids_g = [r["ID"] for r in expected], [r.get("ID") for r in got]
    if ids_e != ids_g:
        problems.append(f"rule ids (in order): module {ids_e}, dev bucket {ids_g}")
    got_by_id = {r.get("ID"): r for r in got}
    for r in expected:
        g = got_by_id.get(r["ID"])
        if g is not None and g != r:
            problems.append(f"rule {r['ID']}: module {r}, dev bucket {g}")
    return problems


# ------------------------------------------------------------------------------------
# Bucket policy (aws_iam_policy_document -> policy JSON), compared as normalized statements


def as_list(v):
    return sorted(v) if isinstance(v, list) else [v]


def normalize_json_statement(st: dict) -> dict:
    principal = st.get("Principal")
    if isinstance(principal, dict):
        principal = {k: as_list(v) for k, v in principal.items()}
    return {
        "Effect": st.get("Effect"),
        "Principal": principal,
        "Action": as_list(st.get("Action", [])),
        "Resource": as_list(st.get("Resource", [])),
        "Condition": {
            test: {var: as_list(vals) for var, vals in cond.items()} for test, cond in st.get("Condition", {}).items()
        },
    }


def module_policy_statements(doc: dict, ctx: dict) -> dict:
    """Sid -> normalized statement, or -> Unsupported (what this check cannot translate)."""
    body = data_source(doc, "aws_iam_policy_document", "data")
    if "dynamic" in body:
        raise Unsupported("dynamic statement blocks")
    out = {}
    for st in body.get("statement", []):
        sid = value(st.get("sid", ""), ctx)
        if not sid:
            raise Unsupported("a statement without sid")
        try:
            principals = st.get("principals", [])
            if len(principals) != 1:
                raise Unsupported(f"{len(principals)} principals blocks")
            ptype = value(principals[0]["type"], ctx)
            ids = [value(i, ctx) for i in principals[0]["identifiers"]]
            principal = "*" if ptype == "*" and ids == ["*"] else {ptype: sorted(ids)}
            conditions: dict = {}
            for c in st.get("condition", []):
                test, var = value(c["test"], ctx), value(c["variable"], ctx)
                conditions.setdefault(test, {})[var] = sorted(value(v, ctx) for v in c["values"])
            out[sid] = {
                "Effect": value(st.get("effect", '"Allow"'), ctx),
                "Principal": principal,
                "Action": sorted(value(a, ctx) for a in st.get("actions", [])),
                "Resource": sorted(value(r, ctx) for r in st.get("resources", [])),
                "Condition": conditions,
            }
        except Unsupported as e:
            out[sid] = e
    return out


def compare_policy(module: dict, policy: dict, not_local: dict) -> list:
    problems = []
    dev = {}
    for st in policy.get("Statement", []):
        sid = st.get("Sid")
        if sid in dev:
            problems.append(f"dev bucket policy has statement {sid!r} twice")
        dev[sid] = normalize_json_statement(st)
    for sid, expected in module.items():
        if sid in not_local:
            if sid in dev:
                problems.append(f"statement {sid} is both applied and in POLICY_NOT_LOCAL")
            elif not str(not_local[sid]).strip():
                problems.append(f"statement {sid} is in POLICY_NOT_LOCAL without a reason")
            continue
        if isinstance(expected, Unsupported):
            problems.append(
                f"statement {sid}: cannot apply locally ({expected}); add it to dev_bucket.POLICY_NOT_LOCAL with the reason"
            )
        elif sid not in dev:
            problems.append(f"statement {sid} of the module is missing from the dev bucket policy")
        elif dev[sid] != expected:
            problems.append(f"statement {sid}: module {expected}, dev bucket {dev[sid]}")
    for sid in dev:
        if sid not in module:
            problems.append(f"dev bucket policy statement {sid!r} is not in the module")
    for sid in not_local:
        if sid not in module:
            problems.append(f"POLICY_NOT_LOCAL names {sid!r}, which the module does not have")
    return problems


# ------------------------------------------------------------------------------------


def main() -> int:
    passed = failed = 0

    def report(what, problems):
        nonlocal passed, failed
        if problems:
            failed += 1
            print(f"  FAIL  {what}")
            for p in problems[:20]:
                print(f"        {p}")
        else:
            passed += 1
            print(f"  ok    {what}")

    print(f"dev bucket check: {dev_bucket.__file__} against {STORAGE.relative_to(INFRA)}/main.tf")
    doc = load(STORAGE / "main.tf")
    ctx = context()

    # Lifecycle.
    try:
        module_rules = module_lifecycle_rules(doc, ctx)
        dev_rules = dev_bucket.lifecycle_rules(ROOT)
        report(
            f"lifecycle rules: dev bucket = module ({', '.join(r['ID'] for r in module_rules)}; default days)",
            compare_lifecycle(module_rules, dev_rules),
        )
    except Unsupported as e:
        module_rules = None
        report("lifecycle rules: the module's can be translated", [str(e)])

    # Policy.
    try:
        module_statements = module_policy_statements(doc, ctx)
        policy = dev_bucket.bucket_policy(BUCKET)
        applied = [s for s in module_statements if s not in dev_bucket.POLICY_NOT_LOCAL]
        report(
            f"bucket policy: dev bucket applies {', '.join(applied)} as the module writes them; "
            f"not locally: {', '.join(f'{k} ({v})' for k, v in dev_bucket.POLICY_NOT_LOCAL.items()) or 'none'}",
            compare_policy(module_statements, policy, dev_bucket.POLICY_NOT_LOCAL),
        )
    except Unsupported as e:
        module_statements = None
        report("bucket policy: the module's can be translated", [str(e)])

    # Public access block, ownership, versioning.
    try:
        pab = resource(doc, "aws_s3_bucket_public_access_block", "data")
        names = {
            "block_public_acls": "BlockPublicAcls",
            "ignore_public_acls": "IgnorePublicAcls",
            "block_public_policy": "BlockPublicPolicy",
            "restrict_public_buckets": "RestrictPublicBuckets",
        }
        expected = {api: value(pab[hcl], ctx) for hcl, api in names.items()}
        report(
            "public access block: dev bucket = module",
            [] if expected == dev_bucket.PUBLIC_ACCESS_BLOCK else [f"module {expected}, dev bucket {dev_bucket.PUBLIC_ACCESS_BLOCK}"],
        )
        ownership = value(block(resource(doc, "aws_s3_bucket_ownership_controls", "data"), "rule")["object_ownership"], ctx)
        versioning = value(block(resource(doc, "aws_s3_bucket_versioning", "data"), "versioning_configuration")["status"], ctx)
        report(
            f"object ownership {ownership} and versioning {versioning}: dev bucket = module",
            [
                f"{what}: module {m!r}, dev bucket {d!r}"
                for what, m, d in [
                    ("object ownership", ownership, dev_bucket.OBJECT_OWNERSHIP),
                    ("versioning", versioning, dev_bucket.VERSIONING),
                ]
                if m != d
            ],
        )
    except (Unsupported, KeyError, TypeError) as e:
        report("public access block, ownership, versioning: the module's can be translated", [str(e)])

    # Self-tests: the comparisons can fail.
    if module_rules:
        changed = copy.deepcopy(module_rules)
        rule = next(r for r in changed if "NoncurrentVersionExpiration" in r)
        rule["NoncurrentVersionExpiration"]["NoncurrentDays"] += 1
        report(
            "self-test: a lifecycle rule with other days is caught",
            [] if compare_lifecycle(module_rules, changed) else ["not caught: the lifecycle check proves nothing"],
        )
    if module_statements:
        policy = dev_bucket.bucket_policy(BUCKET)
        fewer = dict(policy, Statement=policy["Statement"][1:])
        caught_missing = compare_policy(module_statements, fewer, dev_bucket.POLICY_NOT_LOCAL)
        caught_stale = compare_policy(module_statements, policy, dict(dev_bucket.POLICY_NOT_LOCAL, NoSuchStatement="x"))
        report(
            "self-test: a missing policy statement and a stale exception are caught",
            [] if caught_missing and caught_stale else ["not caught: the policy check proves nothing"],
        )

    print(f"devbucket: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
