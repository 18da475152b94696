#!/usr/bin/env bash
# test/integration/meta_json.sh: META.json is valid PGXN metadata (meta spec
# 1.0.0) and agrees with the rest of the release.
#
# Debian packages no PGXN::Meta::Validator, so this checks what the spec
# requires by hand: the required keys and their types, names as PGXN
# "terms", SemVer versions, a license PGXN knows, provides entries with
# file / version (and docfile) that exist in the repository, prereqs
# phases and relationships with valid version ranges, resources as URIs,
# meta-spec 1.0.x, no unknown top-level key (x_ keys aside).  Then the
# release: the version is default_version of idempotency.control (1.0 is
# 1.0.0), DISTVERSION in the Makefile, a section of CHANGELOG.md (one line
# per change); PostgreSQL 15 is the runtime minimum; LICENSE is the PostgreSQL License.
. "$(dirname "$0")/lib.bash"
cd "$TOP"
python3 - <<'PY'
import json, re, sys

errors = []
def err(msg):
    errors.append(msg)

try:
    with open("META.json", encoding="utf-8") as f:
        meta = json.load(f)
except (OSError, ValueError) as e:
    print(f"FAIL: META.json: {e}")
    sys.exit(1)

TERM = re.compile(r"^[^/\\\s\x00-\x1f\x7f]{2,}$")
NUM = r"(?:0|[1-9]\d*)"
IDENT = r"(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)"
SEMVER_BODY = rf"{NUM}\.{NUM}\.{NUM}(?:-{IDENT}(?:\.{IDENT})*)?(?:\+[0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*)?"
SEMVER = re.compile(rf"^{SEMVER_BODY}$")
RANGE_ONE = rf"(?:(?:[=!]=|[<>]=?)\s*)?(?:{SEMVER_BODY}|0)"
RANGE = re.compile(rf"^{RANGE_ONE}(?:,\s*{RANGE_ONE})*$")
URI = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:\S+$")
LICENSES = {"agpl_3", "apache_1_1", "apache_2_0", "artistic_1", "artistic_2", "bsd",
            "freebsd", "gfdl_1_2", "gfdl_1_3", "gpl_1", "gpl_2", "gpl_3", "lgpl_2_1",
            "lgpl_3_0", "mit", "mozilla_1_0", "mozilla_1_1", "openssl", "perl_5",
            "postgresql", "qpl_1_0", "ssleay", "sun", "zlib", "open_source",
            "restricted", "unrestricted", "unknown"}
TOP_KEYS = {"name", "version", "abstract", "maintainer", "license", "provides",
            "meta-spec", "description", "generated_by", "tags", "no_index",
            "prereqs", "release_status", "resources"}

def custom(k):
    return re.match(r"^[xX]_.", k) is not None

def nonempty_str(v):
    return isinstance(v, str) and len(v) > 0

if not isinstance(meta, dict):
    print("FAIL: META.json is not an object")
    sys.exit(1)

for k in ["name", "version", "abstract", "maintainer", "license", "provides", "meta-spec"]:
    if k not in meta:
        err(f"required key {k!r} missing")
for k in meta:
    if k not in TOP_KEYS and not custom(k):
        err(f"unknown top-level key {k!r}")

if "name" in meta and not (isinstance(meta["name"], str) and TERM.match(meta["name"])):
    err("name is not a term (2+ characters, no slash, backslash, space or control character)")
if "version" in meta and not (isinstance(meta["version"], str) and SEMVER.match(meta["version"])):
    err(f"version {meta.get('version')!r} is not SemVer")
for k in ["abstract", "description", "generated_by"]:
    if k in meta and not nonempty_str(meta[k]):
        err(f"{k} must be a non-empty string")

m = meta.get("maintainer")
if m is not None and not (nonempty_str(m) or (isinstance(m, list) and m and all(nonempty_str(x) for x in m))):
    err("maintainer must be a string or a non-empty array of strings")

lic = meta.get("license")
if lic is not None:
    if isinstance(lic, str):
        if lic not in LICENSES:
            err(f"license {lic!r} is not one PGXN knows")
    elif isinstance(lic, list):
        if not lic or any(x not in LICENSES for x in lic):
            err("license array has an unknown entry")
    elif isinstance(lic, dict):
        if not lic or any(not (isinstance(v, str) and URI.match(v)) for v in lic.values()):
            err("license object values must be URIs")
    else:
        err("license must be a string, an array or an object")

prov = meta.get("provides")
if prov is not None:
    if not isinstance(prov, dict) or not prov:
        err("provides must be a non-empty object")
    else:
        for ext, d in prov.items():
            if not TERM.match(ext):
                err(f"provides: {ext!r} is not a term")
            if not isinstance(d, dict):
                err(f"provides.{ext} must be an object")
                continue
            for k in d:
                if k not in {"file", "version", "abstract", "docfile"} and not custom(k):
                    err(f"provides.{ext}: unknown key {k!r}")
            for k in ["file", "version"]:
                if k not in d:
                    err(f"provides.{ext}: required key {k!r} missing")
            if "version" in d and not (isinstance(d["version"], str) and SEMVER.match(d["version"])):
                err(f"provides.{ext}.version is not SemVer")
            if "abstract" in d and not nonempty_str(d["abstract"]):
                err(f"provides.{ext}.abstract must be a non-empty string")
            for k in ["file", "docfile"]:
                if k in d:
                    p = d[k]
                    if not nonempty_str(p) or p.startswith("/") or "\\" in p or ".." in p.split("/"):
                        err(f"provides.{ext}.{k} must be a relative unix path")
                    else:
                        try:
                            open(p, "rb").close()
                        except OSError:
                            err(f"provides.{ext}.{k}: {p} is not in the distribution")

ms = meta.get("meta-spec")
if ms is not None:
    if not isinstance(ms, dict):
        err("meta-spec must be an object")
    else:
        if not (isinstance(ms.get("version"), str) and re.match(r"^1\.0\.\d+$", ms["version"])):
            err("meta-spec.version must be 1.0.x")
        if "url" in ms and ms["url"] not in ("https://pgxn.org/meta/spec.txt", "http://pgxn.org/meta/spec.txt"):
            err("meta-spec.url must be the spec's URL")
        for k in ms:
            if k not in ("version", "url") and not custom(k):
                err(f"meta-spec: unknown key {k!r}")

tags = meta.get("tags")
if tags is not None:
    if not isinstance(tags, list) or not tags or any(
            not (isinstance(t, str) and 2 <= len(t) <= 255 and re.match(r"^[^/\\\x00-\x1f\x7f]{2,}$", t)) for t in tags):
        err("tags must be a non-empty array of 2-255 character strings without slashes")

if "release_status" in meta and meta["release_status"] not in ("stable", "testing", "unstable"):
    err("release_status must be stable, testing or unstable")

pre = meta.get("prereqs")
if pre is not None:
    if not isinstance(pre, dict) or not pre:
        err("prereqs must be a non-empty object")
    else:
        for phase, rels in pre.items():
            if phase not in ("configure", "build", "test", "runtime", "develop") and not custom(phase):
                err(f"prereqs: unknown phase {phase!r}")
                continue
            if not isinstance(rels, dict) or not rels:
                err(f"prereqs.{phase} must be a non-empty object")
                continue
            for rel, deps in rels.items():
                if rel not in ("requires", "recommends", "suggests", "conflicts") and not custom(rel):
                    err(f"prereqs.{phase}: unknown relationship {rel!r}")
                    continue
                if not isinstance(deps, dict):
                    err(f"prereqs.{phase}.{rel} must be an object")
                    continue
                for name, rng in deps.items():
                    if not TERM.match(name):
                        err(f"prereqs.{phase}.{rel}: {name!r} is not a term")
                    if not (rng == 0 or (isinstance(rng, str) and RANGE.match(rng))):
                        err(f"prereqs.{phase}.{rel}.{name}: {rng!r} is not a version range")

res = meta.get("resources")
if res is not None:
    if not isinstance(res, dict) or not res:
        err("resources must be a non-empty object")
    else:
        for k, v in res.items():
            if k == "homepage":
                if not (isinstance(v, str) and URI.match(v)):
                    err("resources.homepage must be a URI")
            elif k in ("bugtracker", "repository"):
                if not isinstance(v, dict) or not v:
                    err(f"resources.{k} must be a non-empty object")
                else:
                    for kk, vv in v.items():
                        if kk in ("web", "url") and not (isinstance(vv, str) and URI.match(vv)):
                            err(f"resources.{k}.{kk} must be a URI")
            elif not custom(k):
                err(f"resources: unknown key {k!r}")

# --- the release agrees with itself
control = open("idempotency.control", encoding="utf-8").read()
dv = re.search(r"^default_version\s*=\s*'([^']+)'", control, re.M)
if not dv:
    err("idempotency.control has no default_version")
else:
    semver = dv.group(1) + ".0" * (2 - dv.group(1).count("."))
    if meta.get("version") != semver:
        err(f"version {meta.get('version')!r} is not default_version {dv.group(1)!r} of idempotency.control ({semver})")
    for ext, d in (prov or {}).items():
        if isinstance(d, dict) and d.get("version") != semver:
            err(f"provides.{ext}.version is not {semver}")
mk = re.search(r"^DISTVERSION\s*=\s*(\S+)", open("Makefile", encoding="utf-8").read(), re.M)
if not mk or mk.group(1) != meta.get("version"):
    err("DISTVERSION in the Makefile is not META.json's version")
# CHANGELOG.md: a section per version, newest first, the first one the
# control file's (the version being made or released); nothing below a
# version that is not one
changelog = open("CHANGELOG.md", encoding="utf-8").read()
sections = re.findall(r"^## \[?([^\]\s(]+)", changelog, re.M)
if not sections or sections[0] != (dv.group(1) if dv else "?"):
    err(f"CHANGELOG.md's first section is {sections[:1]}, not the control file's version")
def vkey(v):
    return tuple(int(x) for x in v.split("."))
bad = [v for v in sections if not re.fullmatch(r"\d+(\.\d+)*", v)]
if bad:
    err(f"CHANGELOG.md has sections that are no version: {bad}")
elif [vkey(v) for v in sections] != sorted((vkey(v) for v in sections), reverse=True):
    err(f"CHANGELOG.md's sections are not newest first: {sections}")
# one line per change: below the first version, every line is a heading,
# a bullet or blank (the explanations belong in doc/)
body = changelog[changelog.find("\n## "):]
loose = [l for l in body.splitlines() if l and not l.startswith(("#", "- "))]
if loose:
    err(f"CHANGELOG.md has {len(loose)} lines that are no heading nor one-line change, first: {loose[0]!r}")
pg = (((pre or {}).get("runtime") or {}).get("requires") or {}).get("PostgreSQL")
if pg not in ("15.0.0", ">= 15.0.0"):
    err(f"prereqs.runtime.requires.PostgreSQL is {pg!r}, not 15.0.0 (at least 15)")
if meta.get("license") != "postgresql":
    err("license is not postgresql")
if "PostgreSQL License" not in open("LICENSE", encoding="utf-8").read():
    err("LICENSE is not the PostgreSQL License")

if errors:
    for e in errors:
        print(f"FAIL: META.json: {e}")
    sys.exit(1)
print(f"META.json: valid PGXN meta spec 1.0.0, {meta['name']} {meta['version']}")
PY
