#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The Spack recipe (packaging/spack/package.py), without Spack: it parses
# (python3's ast), its versions are configure.ac's, each variant is used in
# configure_args, and every --with/--without option configure_args passes
# is one that configure --help lists.
set -u
s=$SQUALL_SRCDIR
command -v python3 > /dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
"$s/configure" --help > "${TMPDIR:-/tmp}/squall-configure-help.$$" 2>&1 || { echo "FAIL: configure --help"; exit 1; }
python3 - "$s/packaging/spack/package.py" "${TMPDIR:-/tmp}/squall-configure-help.$$" "$s/configure.ac" <<'PYEOF'
import ast, re, sys
recipe, helpfile, configure_ac = sys.argv[1:4]
tree = ast.parse(open(recipe).read(), recipe)
help_text = open(helpfile).read()
version = re.search(r"AC_INIT\(\[squall\], \[([^]]+)\]", open(configure_ac).read()).group(1)
fails = []
cls = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Squall"]
if not cls:
    sys.exit("FAIL: no class Squall in " + recipe)
cls = cls[0]
if not any(getattr(b, "id", None) == "AutotoolsPackage" for b in cls.bases):
    fails.append("class Squall is not an AutotoolsPackage")
calls = [n for n in ast.walk(cls) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
def first_args(name):
    return [c.args[0].value for c in calls if c.func.id == name and c.args and isinstance(c.args[0], ast.Constant)]
variants = first_args("variant")
versions = first_args("version")
if sorted(variants) != ["cuda", "mpi", "nccl"]:
    fails.append("variants are %s, not cuda, mpi, nccl" % variants)
if version not in versions:
    fails.append("configure.ac's version %s is not among the recipe's %s" % (version, versions))
method = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "configure_args"]
if not method:
    sys.exit("FAIL: no configure_args")
strings = [n.value for n in ast.walk(method[0]) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
options = sorted({re.match(r"(--[a-z-]+|[A-Z_]+=)", x).group(1) for x in strings if re.match(r"--[a-z]|[A-Z_]+=", x)})
listed = set(re.findall(r"^\s+(--(?:with|without|enable|disable)-[a-z-]+)", help_text, re.M))
listed |= {"--without-" + o[len("--with-"):] for o in listed if o.startswith("--with-")}
listed |= {v + "=" for v in re.findall(r"^\s+([A-Z_]+)\s", help_text, re.M)}
for o in options:
    if o not in listed:
        fails.append("configure_args passes %s, which configure --help does not list" % o)
for v in variants:
    if "+" + v not in strings:
        fails.append("configure_args never looks at the variant %s" % v)
    if not any(o.endswith("-" + v) or (v == "mpi" and o == "MPICC=") for o in options):
        fails.append("no configure option for the variant %s" % v)
for f in fails:
    print("FAIL: " + f)
print("spack-recipe: variants %s onto %s: %s" % (variants, options, "failed" if fails else "passed"))
sys.exit(1 if fails else 0)
PYEOF
rc=$?
rm -f "${TMPDIR:-/tmp}/squall-configure-help.$$"
exit $rc
