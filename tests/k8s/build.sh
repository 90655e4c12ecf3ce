#!/usr/bin/env bash
# Build the upstream Kubernetes control plane that the k8s test tier runs against:
# etcd + etcdctl (go.etcd.io/etcd) and kube-apiserver, kube-scheduler,
# kube-controller-manager (k8s.io/kubernetes), from their Go modules through the Go
# module proxy, into a cache directory outside the work tree so that fresh clones on
# the same machine reuse it. A stamp file records what was built; when it matches,
# this script returns at once.
#
#   tests/k8s/build.sh            build if needed (idempotent)
#   tests/k8s/build.sh --force    rebuild even if the stamp matches
#   tests/k8s/build.sh --print-bin  print the bin directory and exit
#
# Environment: TIDE_K8S_CACHE (default /var/cache/tide-k8s), TIDE_K8S_KUBECTL=1 to
# build kubectl too (optional; not needed by the tests), TIDE_K8S_BUILD_P (Go build
# parallelism, default 2).
set -euo pipefail

K8S_VERSION=v1.36.3      # k8s.io/kubernetes
K8S_STAGING=v0.36.3      # the published k8s.io/* staging modules of that release
ETCD_VERSION=v3.6.16     # go.etcd.io/etcd/server/v3 and go.etcd.io/etcd/etcdctl/v3
BUILD_REV=2              # bump when this script changes what it produces

CACHE=${TIDE_K8S_CACHE:-/var/cache/tide-k8s}
BIN=$CACHE/bin
STAMP=$CACHE/stamp
WANT_KUBECTL=${TIDE_K8S_KUBECTL:-0}

force=0
for a in "$@"; do
  case $a in
    --force) force=1 ;;
    --print-bin) echo "$BIN"; exit 0 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument $a" >&2; exit 2 ;;
  esac
done

log() { printf '[tide-k8s build %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { printf 'build.sh: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null || die "go is not on PATH (Go >= 1.26 is needed)"
GOVER=$(GOTOOLCHAIN=local go env GOVERSION)

progs="etcd etcdctl kube-apiserver kube-scheduler kube-controller-manager"
[ "$WANT_KUBECTL" = 1 ] && progs="$progs kubectl"
# The stamp: line 1 the versions, line 2 the programs built from them. A build with
# kubectl also satisfies a later one without it.
want_stamp="k8s=$K8S_VERSION staging=$K8S_STAGING etcd=$ETCD_VERSION go=$GOVER rev=$BUILD_REV"

up_to_date() {
  [ -f "$STAMP" ] && [ "$(head -n1 "$STAMP")" = "$want_stamp" ] || return 1
  local built p; built=" $(sed -n '2s/^progs=//p' "$STAMP") "
  for p in $progs; do
    case $built in *" $p "*) ;; *) return 1 ;; esac
    [ -x "$BIN/$p" ] || return 1
  done
}

# cluster.sh needs openssl (certificates), curl (readiness, bootstrap objects) and
# flock/setsid (util-linux); install what a bare machine lacks.
missing=""
for t in openssl:openssl curl:curl flock:util-linux setsid:util-linux; do
  command -v "${t%%:*}" >/dev/null || missing="$missing ${t#*:}"
done
if [ -n "$missing" ]; then
  log "installing missing Debian packages:$missing"
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  # shellcheck disable=SC2086
  ($sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing) \
    || die "could not install$missing"
fi

if [ $force = 0 ] && up_to_date; then
  log "up to date in $BIN ($want_stamp)"
  exit 0
fi

mkdir -p "$CACHE"
# One build at a time per cache (CTest fixture and a developer may race).
exec 9>"$CACHE/.lock"
if ! flock -n 9; then
  log "another build holds $CACHE/.lock; waiting"
  flock 9
fi
if [ $force = 0 ] && up_to_date; then
  log "up to date in $BIN (built by the other run)"
  exit 0
fi

export GOPATH=$CACHE/gopath
export GOMODCACHE=$CACHE/gopath/pkg/mod
export GOCACHE=$CACHE/gocache
export GOTOOLCHAIN=local          # use the machine's Go; never fetch a toolchain
export CGO_ENABLED=0              # static, and no C toolchain needed
export GOFLAGS="-p=${TIDE_K8S_BUILD_P:-2} -trimpath -buildvcs=false -modcacherw -mod=mod"
export GOPROXY=${GOPROXY:-https://proxy.golang.org,direct}
NICE="nice -n 19"

t_all=$(date +%s)
log "building into $BIN with $GOVER, GOFLAGS=$GOFLAGS"
log "versions: kubernetes $K8S_VERSION (staging $K8S_STAGING), etcd $ETCD_VERSION"
mkdir -p "$BIN" "$CACHE/src/etcd" "$CACHE/src/kubernetes"
rm -f "$STAMP"

# ---- etcd + etcdctl: a wrapper module requiring both (their own go.mods carry
# ../ replaces, so `go install pkg@version` refuses them).
t=$(date +%s)
cd "$CACHE/src/etcd"
cat >go.mod <<EOF
module tide.dev/k8s-test-build/etcd

go 1.26.0

require (
	go.etcd.io/etcd/server/v3 $ETCD_VERSION
	go.etcd.io/etcd/etcdctl/v3 $ETCD_VERSION
)
EOF
rm -f go.sum
log "etcd: resolving modules"
$NICE go mod download go.etcd.io/etcd/server/v3 go.etcd.io/etcd/etcdctl/v3
log "etcd: compiling etcd, etcdctl"
etcd_ld="-s -w"
$NICE go build -ldflags "$etcd_ld" -o "$BIN/etcd.new" go.etcd.io/etcd/server/v3
$NICE go build -ldflags "$etcd_ld" -o "$BIN/etcdctl.new" go.etcd.io/etcd/etcdctl/v3
mv -f "$BIN/etcd.new" "$BIN/etcd"; mv -f "$BIN/etcdctl.new" "$BIN/etcdctl"
log "etcd: done in $(( $(date +%s) - t )) s"

# ---- Kubernetes: k8s.io/kubernetes requires every staging module at v0.0.0 and
# replaces it with ./staging/...; a dependent module ignores those replaces, so the
# wrapper replaces each with its published v0.36.x. The list comes from the
# release's own go.mod.
t=$(date +%s)
cd "$CACHE/src/kubernetes"
log "kubernetes: fetching k8s.io/kubernetes@$K8S_VERSION go.mod"
kmod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^\s*"GoMod": "\(.*\)",$/\1/p')
[ -f "$kmod" ] || die "could not download k8s.io/kubernetes@$K8S_VERSION"
staging=$(awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" { print $1 }' "$kmod" | sort -u)
[ -n "$staging" ] || die "found no v0.0.0 staging requirements in $kmod"
{
  echo "module tide.dev/k8s-test-build/kubernetes"
  echo
  echo "go 1.26.0"
  echo
  echo "require k8s.io/kubernetes $K8S_VERSION"
  echo
  echo "replace ("
  for m in $staging; do printf '\t%s => %s %s\n' "$m" "$m" "$K8S_STAGING"; done
  echo ")"
} >go.mod
rm -f go.sum
log "kubernetes: $(echo "$staging" | wc -l) staging modules replaced by $K8S_STAGING"
kprogs="kube-apiserver kube-scheduler kube-controller-manager"
[ "$WANT_KUBECTL" = 1 ] && kprogs="$kprogs kubectl"
pkgs=""; vpkgs=""
for p in $kprogs; do pkgs="$pkgs k8s.io/kubernetes/cmd/$p"; vpkgs="$vpkgs k8s.io/kubernetes/cmd/$p@$K8S_VERSION"; done
log "kubernetes: resolving modules"
# @version matters: a bare `go get pkg` would upgrade k8s.io/kubernetes to the newest.
# shellcheck disable=SC2086
$NICE go get $vpkgs
got=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
[ "$got" = "$K8S_VERSION" ] || die "module resolution picked k8s.io/kubernetes $got, not $K8S_VERSION"
minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
vpkg=k8s.io/component-base/version
cpkg=k8s.io/client-go/pkg/version
bdate=$(date -u +%Y-%m-%dT%H:%M:%SZ)
k_ld="-s -w"
for vp in $vpkg $cpkg; do
  k_ld="$k_ld -X $vp.gitVersion=$K8S_VERSION -X $vp.gitMajor=1 -X $vp.gitMinor=$minor"
  k_ld="$k_ld -X $vp.gitTreeState=clean -X $vp.buildDate=$bdate"
done
log "kubernetes: compiling $kprogs (the long part on a cold cache)"
mkdir -p "$BIN/.new"
# shellcheck disable=SC2086
$NICE go build -ldflags "$k_ld" -o "$BIN/.new/" $pkgs
for p in $kprogs; do mv -f "$BIN/.new/$p" "$BIN/$p"; done
rmdir "$BIN/.new"
log "kubernetes: done in $(( $(date +%s) - t )) s"

for p in $progs; do [ -x "$BIN/$p" ] || die "missing $BIN/$p after the build"; done
# A program of an older build (kubectl, say) must not pass for one of this build.
for f in "$BIN"/*; do
  case " $progs " in *" $(basename "$f") "*) ;; *) log "removing stale $f"; rm -f "$f" ;; esac
done
printf '%s\nprogs=%s\n' "$want_stamp" "$progs" >"$STAMP"
log "all built in $(( $(date +%s) - t_all )) s: $(cd "$BIN" && echo $progs)"
