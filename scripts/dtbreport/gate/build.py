"""The gate's builds: a git revision exported into its own directory under build-gate/ and built there (the
dtbench target only), or the working tree's build/ through scripts/build.

Both go through ccache with CCACHE_BASEDIR at the repository root (scripts/build sets it too): ccache then
hashes the paths under it relative to the build directory, which are the same in every tree, so a baseline
whose files are unchanged compiles from the cache and only what the candidate changed is compiled twice.
"""
import os
import shutil
import signal
import subprocess
from pathlib import Path

from . import GateError

ROOT = Path(__file__).resolve().parents[3]
GATE_DIR = ROOT / "build-gate"


def git(*args, check=True):
    try:
        r = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    except FileNotFoundError:
        raise GateError("git not found: the A/B gate builds revisions from the repository") from None
    if check and r.returncode != 0:
        raise GateError(f"git {' '.join(args)}: {(r.stderr.strip().splitlines() or ['failed'])[-1]}")
    return r.stdout.strip() if r.returncode == 0 else None


def resolve(ref):
    """The commit a ref names (40 hex digits), or GateError naming the ref."""
    if not ref or ref.startswith("-"):
        raise GateError(f"unknown git ref '{ref}'")
    sha = git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
    if not sha:
        raise GateError(f"unknown git ref '{ref}' (not a commit of {ROOT})")
    return sha


def default_base():
    """(ref, sha): the merge-base of HEAD with main (origin/main where there is no local main); when that is
    HEAD itself (on main): HEAD if the working tree has uncommitted changes (they are the change), else
    HEAD~1, so that the default compares a change with what came before it."""
    head = resolve("HEAD")
    for main in ("main", "origin/main"):
        if git("rev-parse", "--verify", "--quiet", main, check=False):
            mb = git("merge-base", "HEAD", main, check=False)
            if mb and mb != head:
                return f"merge-base(HEAD, {main})", mb
            break
    if git("status", "--porcelain", "--untracked-files=no", check=False):
        return "HEAD (the working tree has uncommitted changes)", head
    return "HEAD~1", resolve("HEAD~1")


def env():
    e = dict(os.environ)
    e.setdefault("CCACHE_BASEDIR", str(ROOT))
    return e


def _run_logged(cmd, log, cwd=None):
    """cmd's exit status, its output appended to `log`; in a session of its own, whose whole process group
    (make and the compilers) is ended when the gate is interrupted."""
    with open(log, "a", encoding="utf-8") as f:
        f.write("$ " + " ".join(map(str, cmd)) + "\n")
        f.flush()
        try:
            p = subprocess.Popen([str(c) for c in cmd], cwd=cwd, stdout=f, stderr=subprocess.STDOUT, env=env(),
                                 start_new_session=True)
        except FileNotFoundError:
            raise GateError(f"{cmd[0]} not found (scripts/setup installs the build tools)") from None
        try:
            return p.wait()
        except BaseException:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
            raise


def _last_error(log):
    lines = Path(log).read_text(encoding="utf-8", errors="replace").splitlines()
    for line in reversed(lines):
        if "error" in line.lower():
            return line.strip()[:200]
    return (lines[-1].strip() if lines else "no output")[:200]


def build_revision(sha, label, jobs=None, progress=print):
    """build-gate/<sha12>/build/dtbench, built from the tree of commit `sha` (exported with git archive,
    configured as build/ is: configure_options). Reused when already built so. GateError when it does not
    build, naming `label` and the first error line (the whole log: build-gate/<sha12>/build.log)."""
    jobs = jobs or os.cpu_count() or 2
    d = GATE_DIR / sha[:12]
    binary = d / "build" / "dtbench"
    done = d / ".built"
    stamp = sha + " " + " ".join(configure_options()) + "\n"
    if done.exists() and binary.exists() and done.read_text(encoding="utf-8", errors="replace") == stamp:
        return binary
    src = d
    log = d / "build.log"
    if not (d / ".extracted").exists():  # exported whole or not at all: into a temporary directory, renamed
        tmp = GATE_DIR / f".{sha[:12]}.tmp"
        try:
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.rmtree(d, ignore_errors=True)
            tmp.mkdir(parents=True)
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", sha], capture_output=True)
            if archive.returncode != 0:
                raise GateError(f"{label}: git archive {sha[:12]} failed: "
                                f"{archive.stderr.decode(errors='replace').strip()}")
            if subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive.stdout, capture_output=True).returncode:
                raise GateError(f"{label}: cannot unpack {sha[:12]} into {tmp}")
            (tmp / ".extracted").write_text(sha + "\n", encoding="utf-8")
            tmp.rename(d)
        except FileNotFoundError as e:
            raise GateError(f"{label}: {e.filename} not found") from None
        except OSError as e:
            raise GateError(f"{label}: cannot export {sha[:12]} into {GATE_DIR} ({e.strerror})") from None
    log.write_text("", encoding="utf-8")
    progress(f"gate: building {label} ({sha[:12]}) in {d.relative_to(ROOT)}/build (log: {log.relative_to(ROOT)})")
    if _run_logged(["cmake", "-S", src, "-B", d / "build", *configure_options()], log) != 0 or \
            _run_logged(["cmake", "--build", d / "build", "-j", str(jobs), "--target", "dtbench"], log) != 0 or \
            not binary.exists():
        raise GateError(f"{label} ({sha[:12]}) does not build: {_last_error(log)} (log: {log})")
    done.write_text(stamp, encoding="utf-8")
    return binary


def export_env():
    """Environment for runs of a binary built in build-gate/: git stops there, so that its reports say their
    commit is unknown rather than the repository's HEAD (an exported tree has no .git of its own)."""
    return {"GIT_CEILING_DIRECTORIES": str(GATE_DIR)}


def configure_options():
    """The options build/ was configured with (its CMakeCache.txt: build type, C++ flags, CUDA on or off), so
    that the baseline is built as the candidate is; Release where build/ is not configured yet (scripts/build's
    default)."""
    cache = ROOT / "build" / "CMakeCache.txt"
    want = {"CMAKE_BUILD_TYPE": "Release"}
    try:
        for line in cache.read_text(encoding="utf-8", errors="replace").splitlines():
            name, _, value = line.partition("=")
            key = name.split(":", 1)[0]
            if key in ("CMAKE_BUILD_TYPE", "CMAKE_CXX_FLAGS", "DTB_CUDA", "CMAKE_CUDA_ARCHITECTURES"):
                want[key] = value
    except OSError:
        pass
    return [f"-D{k}={v}" for k, v in want.items()]


def build_worktree(progress=print):
    """build/dtbench of the working tree, through scripts/build dtbench; GateError when it does not build."""
    log = ROOT / "build" / "gate-build.log"
    log.parent.mkdir(exist_ok=True)
    log.write_text("", encoding="utf-8")
    progress("gate: building the working tree (build/dtbench)")
    if _run_logged([ROOT / "scripts" / "build", "dtbench"], log, cwd=ROOT) != 0:
        raise GateError(f"the working tree does not build: {_last_error(log)} (log: {log})")
    return ROOT / "build" / "dtbench"
