#!/usr/bin/env bash
# The project's formatting and lint checks, for CI (tests/style) and pre-commit (.pre-commit-config.yaml).
#
#   deploy/check-style.sh [--staged] [--fix] [cpp|python|shell ...]
#
# cpp:    clang-format (.clang-format, at the major release toolchain.env pins) over the C++ lines
#         changed since the commit that added .clang-format, as the working tree (or, with --staged,
#         the index) has them; older lines stay as they are. --fix formats those lines in place.
# python: ruff (ruff.toml) over every tracked Python file. --fix applies ruff's safe fixes.
# shell:  shellcheck, warnings and errors, over every tracked shell script.
# With no kind named, all three. Exits 1 when a check fails, printing what to change; otherwise 77
# when a check could not run (no git history, or its tool is not installed: a source tarball, a
# machine without deploy/install-deps.sh's tools), after running the others.
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo" || exit 2
. deploy/toolchain.env
staged=0
fix=0
kinds=()
for argument in "$@"; do
  case $argument in
    --staged) staged=1 ;;
    --fix) fix=1 ;;
    cpp | python | shell) kinds+=("$argument") ;;
    *) echo "check-style: unknown argument $argument" >&2; exit 2 ;;
  esac
done
[[ ${#kinds[@]} -gt 0 ]] || kinds=(cpp python shell)

# A check that cannot run says why and returns 77; the others still run.
skipped() {
  echo "check-style: $kind SKIPPED: $*"
  return 77
}

# Tracked files matching the patterns that the working tree still has (a deletion not yet staged
# is no file to check).
tracked_files() {
  local file
  while IFS= read -r -d '' file; do
    [[ -f $file ]] && echo "$file"
  done < <(git ls-files -z -- "$@")
}

check_cpp() {
  # Each clang-format release formats some constructs differently: the pinned one, by its own name.
  local formatter=clang-format-$GRAPHSERVE_CLANG_FORMAT_VERSION
  local driver=git-clang-format-$GRAPHSERVE_CLANG_FORMAT_VERSION
  command -v "$formatter" >/dev/null && command -v "$driver" >/dev/null ||
    skipped "$driver not installed (deploy/install-deps.sh)" || return
  local base
  base=$(git log --diff-filter=A --format=%H -- .clang-format | tail -n 1)
  if [[ -z $base ]]; then
    if [[ $(git rev-parse --is-shallow-repository) == true ]]; then
      skipped "a shallow clone without the commit that added .clang-format"
    else
      skipped ".clang-format is not committed yet"
    fi
    return
  fi
  local arguments=(--binary "$(command -v "$formatter")" --extensions "cpp,cc,h,hpp,cu,cuh")
  [[ $staged == 1 ]] && arguments+=(--staged)
  # Fixing the working tree: what clang-format read is the working tree itself, so overwriting the
  # files with unstaged changes loses nothing (--staged formats the index and never forces).
  if [[ $fix == 1 ]]; then
    [[ $staged == 0 ]] && arguments+=(--force)
  else
    arguments+=(--diff)
  fi
  local out status
  out=$("$driver" "${arguments[@]}" "$base" 2>&1)
  status=$?
  # 0 (and, from release 15 on, 1 for a diff) is an answer; anything else is git-clang-format failing.
  if [[ $status -gt 1 ]]; then
    echo "$out"
    echo "check-style: $driver failed ($status)"
    return 1
  fi
  case $out in
    "" | "no modified files to format" | "clang-format did not modify any files") return 0 ;;
  esac
  echo "$out"
  [[ $fix == 1 ]] && return 0
  echo "check-style: C++ lines changed since .clang-format was added are not formatted;" \
    "deploy/check-style.sh --fix cpp formats them"
  return 1
}

check_python() {
  local python=${GRAPHSERVE_PYTHON:-$GRAPHSERVE_VENV/bin/python3}
  "$python" -m ruff --version >/dev/null 2>&1 ||
    skipped "ruff not installed for $python (deploy/install-deps.sh)" || return
  local files arguments=(check --quiet --no-cache)
  [[ $fix == 1 ]] && arguments+=(--fix)
  mapfile -t files < <(tracked_files '*.py')
  [[ ${#files[@]} -gt 0 ]] || return 0
  "$python" -m ruff "${arguments[@]}" "${files[@]}"
}

check_shell() {
  command -v shellcheck >/dev/null || skipped "shellcheck not installed (deploy/install-deps.sh)" || return
  local files
  mapfile -t files < <(tracked_files '*.sh' .ci/run)
  [[ ${#files[@]} -gt 0 ]] || return 0
  shellcheck --severity=warning "${files[@]}"
}

if ! git rev-parse --git-dir >/dev/null 2>&1; then
  echo "check-style: SKIPPED: not a git checkout"
  exit 77
fi
failed=0
skips=0
for kind in "${kinds[@]}"; do
  case $kind in
    cpp) check_cpp ;;
    python) check_python ;;
    shell) check_shell ;;
  esac
  case $? in
    0) ;;
    77) skips=1 ;;
    *) failed=1 ;;
  esac
done
[[ $failed == 1 ]] && exit 1
[[ $skips == 1 ]] && exit 77
exit 0
