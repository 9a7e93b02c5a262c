# shellcheck shell=bash
# Source this, then `bookworm_apt CACHE_DIR`: apt-get and apt-cache (and debroot,
# hack/tools/cmd/debroot, which runs them) then see Debian bookworm and nothing else,
# whatever release, pins or extra repositories the host's apt is set to. They get their
# own sources, package lists, dpkg status (empty: nothing counts as installed) and
# preferences under CACHE_DIR/apt-bookworm, through APT_CONFIG. Used by hack/images.sh
# (the filevol image) and test/e2e/cluster/images/build-images.sh (the e2e images that
# need GNU tools). The lists are fetched when missing or a day old.
#
# FILEVOL_DEBIAN_MIRROR overrides http://deb.debian.org (e.g. a local mirror).
#
# --arch ARCH (e.g. arm64, for hack/images.sh --multiarch): apt sees bookworm's ARCH
# packages instead of the host's, download only (apt-get download, apt-cache show: no
# dpkg --add-architecture, nothing is installed). That configuration has its own
# directory, CACHE_DIR/apt-bookworm-ARCH, with APT::Architecture set in its apt.conf; the
# host's (CACHE_DIR/apt-bookworm, no --arch) stays what it was.

# bookworm_apt CACHE_DIR [--if-missing] [--arch ARCH]: export APT_CONFIG. --if-missing
# fetches the lists only when there are none (the e2e build: its cache check must work
# offline).
bookworm_apt() {
  local d=$1/apt-bookworm m=${FILEVOL_DEBIAN_MIRROR:-http://deb.debian.org}
  local if_missing= arch=
  shift
  while [ $# -gt 0 ]; do
    case $1 in
      --if-missing) if_missing=1 ;;
      --arch) arch=$2; shift ;;
      *) echo "bookworm_apt: unknown argument $1" >&2; return 2 ;;
    esac
    shift
  done
  [ -z "$arch" ] || d=$d-$arch
  local kr=/usr/share/keyrings/debian-archive-keyring.gpg
  [ -s "$kr" ] || { echo "bookworm_apt: $kr missing (apt-get install debian-archive-keyring)" >&2; return 1; }
  mkdir -p "$d"/{lists/partial,cache/archives/partial,sources.list.d,preferences.d}
  [ -e "$d/status" ] || : > "$d/status"
  cat > "$d/sources.list.new" <<EOF
deb [signed-by=$kr] $m/debian bookworm main
deb [signed-by=$kr] $m/debian bookworm-updates main
deb [signed-by=$kr] $m/debian-security bookworm-security main
EOF
  mv -f "$d/sources.list.new" "$d/sources.list"
  cat > "$d/apt.conf.new" <<EOF
Dir::Etc::SourceList "$d/sources.list";
Dir::Etc::SourceParts "$d/sources.list.d";
Dir::Etc::Preferences "$d/preferences";
Dir::Etc::PreferencesParts "$d/preferences.d";
Dir::State::Lists "$d/lists";
Dir::State::status "$d/status";
Dir::Cache "$d/cache";
Acquire::Languages "none";
EOF
  [ -z "$arch" ] || printf 'APT::Architecture "%s";\nAPT::Architectures { "%s"; };\n' "$arch" "$arch" >> "$d/apt.conf.new"
  mv -f "$d/apt.conf.new" "$d/apt.conf"
  export APT_CONFIG=$d/apt.conf
  local age=(-mtime -1)
  [ -n "$if_missing" ] && age=()
  if [ -z "$(find "$d/lists" -maxdepth 1 -name '*_bookworm_InRelease' "${age[@]}" 2>/dev/null)" ]; then
    # Our own lists lock; the host's apt is never locked or touched.
    flock "$d/.lock" apt-get -q update >"$d/update.log" 2>&1 ||
      { echo "bookworm_apt: apt-get update failed:" >&2; tail -n 20 "$d/update.log" >&2; return 1; }
  fi
  # What apt now offers must be bookworm's, or the images would not be what they say.
  [[ $(apt-cache policy) == *n=bookworm,* ]] ||
    { echo "bookworm_apt: no bookworm release in $d/lists" >&2; return 1; }
}
