# Sourced by the tools/*/build.sh scripts: programs the tests need, built once per machine and
# kept under ${NCCLPROF_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ncclprof}/<name>/.
cache_root="${NCCLPROF_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ncclprof}"

# cache_lookup BIN [--check]: when BIN is built, prints its path and ends the script. Otherwise,
# with --check it says so and ends the script with 1; without, it takes the machine's build lock
# for BIN (parallel CI jobs share the cache), looks once more and returns: the caller builds.
cache_lookup() {
  local bin=$1
  if [ -x "$bin" ]; then
    echo "$bin"
    exit 0
  fi
  if [ "${2:-}" = "--check" ]; then
    echo "$0: nothing built yet at $bin; run $0" >&2
    exit 1
  fi
  mkdir -p "$cache_root"
  exec 9>"$cache_root/.$(basename "$(dirname "$bin")").lock"
  flock 9
  if [ -x "$bin" ]; then # built by whoever held the lock before us
    echo "$bin"
    exit 0
  fi
}

# cache_publish BUILT BIN: copies BUILT to BIN atomically (a half-copied binary is never visible
# under its final name) and prints BIN.
cache_publish() {
  local built=$1 bin=$2
  mkdir -p "$(dirname "$bin")"
  cp "$built" "$bin.tmp"
  mv -f "$bin.tmp" "$bin"
  echo "$0: built $bin" >&2
  echo "$bin"
}

# cache_lock NAME: holds the machine's lock NAME until the script ends, so that two clones (or
# CI jobs) making the same cached environment take turns and the second finds it made.
cache_lock() {
  mkdir -p "$cache_root"
  exec 8>"$cache_root/.$1.lock"
  flock 8
}

# cache_link DIR LINK: makes LINK (a path under a clone's build/) a symbolic link to the cached
# DIR, replacing whatever LINK was (an environment made there by an older script included).
cache_link() {
  local dir=$1 link=$2
  [ "$(readlink "$link" 2>/dev/null)" = "$dir" ] && return 0
  rm -rf "$link"
  mkdir -p "$(dirname "$link")"
  ln -s "$dir" "$link"
}
