#!/usr/bin/env bash
# Builds what docker/compose.yaml runs, with podman and no daemon: each upstream image is
# used if present or pullable, a stand-in from this folder is built where it is not (no
# registry reachable), then the project's images from docker/ as they are.
#
#   docker/standins/podman.sh env             # the podman settings, as NAME=value lines
#   docker/standins/podman.sh build [--spark] # stand-ins where needed, mirror:dev (+ mirror:dev-spark)
#   docker/standins/podman.sh check           # can a container start on a bridge network here?
#
# Reruns are quick: the base image and each stand-in are kept in podman's storage (a
# stand-in is rebuilt only when its files change) and podman's layer cache keeps the rest.
# Package downloads inside the builds trust the host's CA bundle (a TLS-inspecting proxy),
# given as a build secret: it is in no layer of any image.
set -euo pipefail
shopt -s nullglob

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${CACHE:-$HOME/.cache/mirror}
home=${MIRROR_PODMAN_HOME:-$cache/podman}
base=localhost/mirror-standin/debian:bookworm
kafka_libs=${KAFKA_LIBS:-$cache/kafka-4.1.1/libs}
cassandra_libs=${CASSANDRA_LIBS:-$cache/cassandra-5.0.6/libs}
# The Dockerfiles' digest-pinned bases (ARG defaults there) and the tags their stand-ins take.
python_pinned=$(sed -n 's/^ARG PYTHON_IMAGE=//p' "$root/docker/Dockerfile")
maven_pinned=$(sed -n 's/^ARG MAVEN_IMAGE=//p' "$root/docker/Dockerfile.spark")

log() { printf '[podman.sh %s] %s\n' "$(date +%T)" "$*" >&2; }

# Settings for machines without systemd or CAP_SYS_RESOURCE, harmless elsewhere: podman's
# default ulimits are above the hard limits such a process may set (it runs its runtime with
# RLIMIT_NPROC lowered to 32768), the cgroup v1/v2 hybrid needs runc and cgroupfs, there is
# no journald for events, and compose services find each other by name only through
# netavark's DNS (aardvark-dns; Debian's CNI setup has none).
write_conf() {
  mkdir -p "$home"
  local nofile nproc
  nofile=$(ulimit -Hn)
  nproc=$(ulimit -Hu)
  [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ] && nproc=32768
  cat > "$home/containers.conf.tmp" <<EOF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
[network]
network_backend = "netavark"
EOF
  mv "$home/containers.conf.tmp" "$home/containers.conf"
  export CONTAINERS_CONF="$home/containers.conf"
}

# Builds use the host's network (--network host): their downloads go out the way the host's
# own do (its resolver, its proxy), which a sandbox may not route from a bridge network.
#
# Build secrets for the downloads inside builds: a PEM bundle (pip, the OS) and a Java
# trust store (Maven), each only if the host has one.
secrets=()
find_secrets() {
  local pem=${MIRROR_BUILD_CA_BUNDLE:-${PIP_CERT:-${REQUESTS_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}}}
  local jks=${MIRROR_BUILD_JAVA_TRUSTSTORE:-/etc/ssl/certs/java/cacerts}
  [ -s "$pem" ] && secrets+=(--secret "id=ca_bundle,src=$pem")
  [ -s "$jks" ] && secrets+=(--secret "id=java_truststore,src=$jks")
  return 0
}

build_base() {
  podman image exists "$base" && return
  log "building $base with debootstrap (minbase)"
  local tmp
  tmp=$(mktemp -d)
  debootstrap --variant=minbase bookworm "$tmp/rootfs" http://deb.debian.org/debian >"$tmp/debootstrap.log" 2>&1 \
    || { tail -20 "$tmp/debootstrap.log" >&2; rm -rf "$tmp"; return 1; }
  rm -rf "$tmp"/rootfs/var/cache/apt/archives/*.deb "$tmp"/rootfs/var/lib/apt/lists/*
  tar -C "$tmp/rootfs" -c . | podman import --change 'CMD ["bash"]' - "$base" >/dev/null
  rm -rf "$tmp"
}

# standin IMAGE CONTAINERFILE [LIBS]: keep IMAGE if it is there (an upstream image, or this
# stand-in with the same files) or can be pulled; else build the stand-in, with LIBS (a jar
# folder) beside its scripts in the build context.
standin() {
  local image=$1 file=$here/$2 libs=${3:-} name=${2%.Containerfile}
  local sum
  sum=$(cat "$file" "$here/$name"-*.sh | sha256sum | cut -c1-16)
  if podman image exists "$image"; then
    local have
    have=$(podman image inspect --format '{{ index .Labels "org.mirror.standin" }}' "$image")
    [ -z "$have" ] || [ "$have" = "<no value>" ] || [ "$have" = "$sum" ] && return
  elif timeout 120 podman pull -q "$image" >/dev/null 2>&1; then
    return
  fi
  build_base
  log "building the stand-in $image ($2)"
  local ctx
  ctx=$(mktemp -d)
  local scripts=("$here/$name"-*.sh)
  [ ${#scripts[@]} = 0 ] || cp "${scripts[@]}" "$ctx/"
  if [ -n "$libs" ]; then
    [ -d "$libs" ] || { log "$libs is missing: run make setup"; return 1; }
    cp -al "$libs" "$ctx/libs" 2>/dev/null || cp -a "$libs" "$ctx/libs"
  fi
  podman build -q --pull=never --format docker --network host "${secrets[@]}" --label "org.mirror.standin=$sum" \
    --build-arg "BASE=$base" -t "$image" -f "$file" "$ctx" >/dev/null || { rm -rf "$ctx"; return 1; }
  rm -rf "$ctx"
}

# The reference to build FROM: the Dockerfile's digest-pinned one where it is present or
# can be pulled, else the stand-in's tag (a stand-in cannot have the upstream digest).
base_ref() {
  local pinned=$1 tag=$2
  if podman image exists "$pinned" || timeout 120 podman pull -q "$pinned" >/dev/null 2>&1; then
    echo "$pinned"
  else
    echo "$tag"
  fi
}

build() {
  local spark=0
  [ "${1:-}" = --spark ] && spark=1
  find_secrets
  standin docker.io/library/python:3.11-slim python.Containerfile
  standin docker.io/apache/kafka:4.1.1 kafka.Containerfile "$kafka_libs"
  standin docker.io/library/cassandra:5.0 cassandra.Containerfile "$cassandra_libs"
  standin docker.io/prom/prometheus:v3.5.0 prometheus.Containerfile
  local python
  python=$(base_ref "$python_pinned" docker.io/library/python:3.11-slim)
  log "building mirror:dev from docker/Dockerfile on $python"
  # --format docker: the OCI format has no HEALTHCHECK, podman would drop it.
  podman build -q --pull=never --format docker --network host "${secrets[@]}" --build-arg "PYTHON_IMAGE=$python" \
    -t localhost/mirror:dev -f "$root/docker/Dockerfile" "$root" >/dev/null
  if [ "$spark" = 1 ]; then
    standin docker.io/library/maven:3.9-eclipse-temurin-17 maven.Containerfile
    local maven
    maven=$(base_ref "$maven_pinned" docker.io/library/maven:3.9-eclipse-temurin-17)
    log "building mirror:dev-spark from docker/Dockerfile.spark on $python and $maven"
    podman build -q --pull=never --format docker --network host "${secrets[@]}" --build-arg "PYTHON_IMAGE=$python" \
      --build-arg "MAVEN_IMAGE=$maven" -t localhost/mirror:dev-spark -f "$root/docker/Dockerfile.spark" "$root" >/dev/null
  fi
}

# A container on a bridge network (what every compose service gets) started and run to its
# end: podman, runc, netavark and the firewall tool netavark drives all work. Debian's
# netavark needs iptables and does not depend on it, so without it containers stay
# "Created" with "netavark: No such file or directory" deep in a compose log; this says it
# in one line before a test relies on it.
check() {
  local missing=()
  for tool in podman runc iptables /usr/lib/podman/netavark /usr/lib/podman/aardvark-dns; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
  done
  if [ ${#missing[@]} != 0 ]; then
    echo "podman cannot start containers here: missing ${missing[*]} (make setup installs them with apt-get)" >&2
    return 1
  fi
  build_base
  local net=mirror-check out
  podman network exists "$net" || podman network create "$net" >/dev/null
  if ! out=$(podman run --rm --network "$net" --pull=never "$base" true 2>&1); then
    podman network rm -f "$net" >/dev/null 2>&1 || true
    echo "podman cannot start a container on a bridge network: $(echo "$out" | tail -1)" >&2
    return 1
  fi
  podman network rm -f "$net" >/dev/null 2>&1 || true
}

write_conf
case "${1:-}" in
  check) check ;;
  env) echo "CONTAINERS_CONF=$CONTAINERS_CONF" ;;
  build) shift; build "$@" ;;
  *) echo "usage: $0 env | build [--spark] | check" >&2; exit 2 ;;
esac
