#!/usr/bin/env bash
# A real Kubernetes control plane on loopback for Tide's k8s test tier: etcd,
# kube-apiserver, kube-scheduler and kube-controller-manager built by build.sh, with
# generated certificates, RBAC, service-account tokens, and Tide's node agent
# standing in for kubelets. No container runtime, no kubelet, no mock.
#
#   cluster.sh up [options]   start (no-op if already up and healthy; --fresh restarts)
#   cluster.sh down           stop everything and remove the run directory
#   cluster.sh env            print `export KUBECONFIG=...` etc. (use with eval)
#   cluster.sh status         what runs, and whether the apiserver is ready
#   cluster.sh restart-apiserver [--kill] stop (SIGTERM; --kill: SIGKILL) and start
#                                         kube-apiserver, wait until it is ready
#   cluster.sh restart|stop COMPONENT [--kill]   etcd|apiserver|scheduler|
#   cluster.sh start COMPONENT                   controller-manager|agent
#   cluster.sh compact [--restart]        compact etcd to its current revision (printed);
#                                         --restart: then restart-apiserver, so that its
#                                         watch cache forgets the past too (410 Gone)
#   cluster.sh nodes          the node specs handed to the agent, one a line
#   cluster.sh logs [COMPONENT]   the log files (or the tail of one)
#
# up options:
#   --nodes N             the first N of the default node list (see README; default 4)
#   --node SPEC           an explicit node (repeatable; replaces the default list)
#   --agent-args "..."    extra arguments for tide-node-agent
#   --no-agent            do not start the node agent
#   --require-agent       fail if the agent is missing or its nodes do not get Ready
#   --no-watch-cache      run kube-apiserver with --watch-cache=false
#   --apiserver-args "..." / --scheduler-args "..." / --controller-manager-args "..."
#   --fresh               `down` first if a cluster is running
#
# Environment: TIDE_K8S_CACHE (binaries, default /var/cache/tide-k8s), TIDE_K8S_RUN
# (state, default /tmp/tide-k8s-run), TIDE_NODE_AGENT (agent binary, default
# <repo>/build/tide-node-agent), TIDE_K8S_ETCD_PORT (12379), TIDE_K8S_ETCD_PEER_PORT
# (12380), TIDE_K8S_APISERVER_PORT (16443), TIDE_K8S_SCHEDULER_PORT (11259),
# TIDE_K8S_CM_PORT (11257).
set -euo pipefail

SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
HERE=$(dirname "$SELF")
REPO=$(cd "$HERE/../.." && pwd)
CACHE=${TIDE_K8S_CACHE:-/var/cache/tide-k8s}
RUN=${TIDE_K8S_RUN:-/tmp/tide-k8s-run}
case $RUN in /*) ;; *) RUN=$PWD/$RUN ;; esac
# The node agent keeps its state under $TIDE_K8S_RUN/agent; so `down` removes it.
export TIDE_K8S_RUN=$RUN

# Progress goes to stderr; stdout carries only what a caller may capture (env,
# status, the compacted revision, the node list).
log() { printf '[tide-k8s %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
warn() { printf '[tide-k8s %s] WARNING: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'cluster.sh: %s\n' "$*" >&2; exit 1; }

# Settings of a running cluster live in $RUN/cluster.env so that later commands
# (status, compact, restart) use the ports and paths `up` chose.
load_settings() {
  if [ -f "$RUN/cluster.env" ]; then
    # shellcheck disable=SC1091
    . "$RUN/cluster.env"
  fi
  BIN=${BIN:-$CACHE/bin}
  ETCD_PORT=${ETCD_PORT:-${TIDE_K8S_ETCD_PORT:-12379}}
  ETCD_PEER_PORT=${ETCD_PEER_PORT:-${TIDE_K8S_ETCD_PEER_PORT:-12380}}
  API_PORT=${API_PORT:-${TIDE_K8S_APISERVER_PORT:-16443}}
  SCHED_PORT=${SCHED_PORT:-${TIDE_K8S_SCHEDULER_PORT:-11259}}
  CM_PORT=${CM_PORT:-${TIDE_K8S_CM_PORT:-11257}}
  SERVICE_CIDR=${SERVICE_CIDR:-10.96.0.0/16}
  SERVICE_IP=${SERVICE_IP:-10.96.0.1}
  POD_CIDR=${POD_CIDR:-127.0.100.0/24}
  SA_ISSUER=${SA_ISSUER:-https://kubernetes.default.svc.cluster.local}
  API_URL=https://127.0.0.1:$API_PORT
  ETCD_URL=http://127.0.0.1:$ETCD_PORT
  PKI=$RUN/pki
}

# ---------------------------------------------------------------- helpers

# curl against the apiserver as the admin (system:masters).
kcurl() {
  local method=$1 path=$2; shift 2
  curl -sS --max-time 10 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    -X "$method" -H 'Content-Type: application/json' -H 'Accept: application/json' \
    "$@" "$API_URL$path"
}
# HTTP status only.
kcode() {
  local method=$1 path=$2; shift 2
  kcurl "$method" "$path" -o /dev/null -w '%{http_code}' "$@" 2>/dev/null || true
}
# POST a JSON object; 409 (already there) is fine.
kcreate() {
  local path=$1 body=$2 code
  code=$(kcode POST "$path" --data-binary "$body")
  case $code in
    200|201|202|409) ;;
    *) die "creating $path failed: HTTP $code: $(kcurl POST "$path" --data-binary "$body" || true)" ;;
  esac
}

apiserver_ready() {
  [ "$(curl -s --max-time 3 --cacert "$PKI/ca.crt" -o /dev/null -w '%{http_code}' "$API_URL/readyz" 2>/dev/null)" = 200 ]
}

# wait_for SECONDS COMMAND...: poll every 0.2 s until COMMAND succeeds.
wait_for() {
  local secs=$1; shift
  local deadline=$(( $(date +%s) + secs ))
  until "$@"; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      return 1
    fi
    sleep 0.2
  done
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

pid_of() { cat "$RUN/pids/$1.pid" 2>/dev/null || true; }

# Alive, and still the program we started (a recycled pid is not ours).
alive() {
  local pid; pid=$(pid_of "$1")
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && \
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$(prog_of "$1")"
}

prog_of() {
  case $1 in
    etcd) echo "$BIN/etcd" ;;
    apiserver) echo "$BIN/kube-apiserver" ;;
    scheduler) echo "$BIN/kube-scheduler" ;;
    controller-manager) echo "$BIN/kube-controller-manager" ;;
    agent) echo "tide-node-agent" ;;
    *) die "unknown component $1 (etcd, apiserver, scheduler, controller-manager, agent)" ;;
  esac
}

COMPONENTS="etcd apiserver controller-manager scheduler agent"

# Start a component from its saved command line ($RUN/cmd/NAME), detached from this
# shell (own session, stdio on its log) so that CTest and callers do not wait on it.
start_component() {
  local name=$1
  [ -f "$RUN/cmd/$name" ] || die "no saved command for $name (is the cluster up?)"
  if alive "$name"; then
    log "$name already running (pid $(pid_of "$name"))"
    return 0
  fi
  local -a argv
  mapfile -d '' -t argv <"$RUN/cmd/$name"
  printf '\n===== %s start: %s\n' "$(date '+%F %T')" "${argv[*]}" >>"$RUN/logs/$name.log"
  setsid "${argv[@]}" </dev/null >>"$RUN/logs/$name.log" 2>&1 &
  echo $! >"$RUN/pids/$name.pid"
}

# stop_component NAME [GRACE-SECONDS]: SIGTERM, then SIGKILL after the grace (0:
# SIGKILL at once, a crash). kube-apiserver gets 3 s by default: after SIGTERM it
# stops listening at once but then waits up to a minute for open watches to end.
stop_component() {
  local name=$1 grace=${2:-}
  local pid i
  if [ -z "$grace" ]; then
    if [ "$name" = apiserver ]; then grace=${TIDE_K8S_APISERVER_GRACE:-3}; else grace=10; fi
  fi
  pid=$(pid_of "$name")
  if [ -n "$pid" ] && alive "$name"; then
    if [ "$grace" -gt 0 ]; then
      kill -TERM "$pid" 2>/dev/null || true
      for i in $(seq 1 $(( grace * 10 ))); do
        alive "$name" || break
        sleep 0.1
      done
    fi
    if alive "$name"; then
      [ "$grace" = 0 ] || log "$name (pid $pid) still running $grace s after SIGTERM; SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      for i in $(seq 1 50); do alive "$name" || break; sleep 0.1; done
    fi
  fi
  rm -f "$RUN/pids/$name.pid"
}

save_cmd() { local name=$1; shift; printf '%s\0' "$@" >"$RUN/cmd/$name"; }

tail_log() { [ -f "$RUN/logs/$1.log" ] && tail -n "${2:-30}" "$RUN/logs/$1.log" >&2 || true; }

# ---------------------------------------------------------------- certificates

gen_key_ec() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

# gen_cert NAME SUBJECT EXT-SECTION [SANS]: key + certificate signed by the CA.
gen_cert() {
  local name=$1 subj=$2 kind=$3 sans=${4:-}
  gen_key_ec "$PKI/$name.key"
  {
    echo "[ext]"
    echo "basicConstraints = critical, CA:FALSE"
    echo "keyUsage = critical, digitalSignature, keyEncipherment"
    if [ "$kind" = server ]; then
      echo "extendedKeyUsage = serverAuth"
      echo "subjectAltName = $sans"
    else
      echo "extendedKeyUsage = clientAuth"
    fi
  } >"$PKI/$name.ext"
  openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days 3650 -sha256 \
    -extfile "$PKI/$name.ext" -extensions ext -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

gen_pki() {
  mkdir -p "$PKI"
  chmod 700 "$PKI"
  gen_key_ec "$PKI/ca.key"
  openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=tide-k8s-ca" -days 3650 -sha256 \
    -config <(printf '[req]\ndistinguished_name=dn\n[dn]\n[ca]\nbasicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign,digitalSignature\nsubjectKeyIdentifier=hash\n') \
    -extensions ca -out "$PKI/ca.crt" 2>/dev/null
  local api_sans="DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
  api_sans="$api_sans,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:::1,IP:$SERVICE_IP"
  # The agent serves ClusterIP 10.96.x.y on 127.96.x.y, so a pod that dials the
  # kubernetes Service through KUBERNETES_SERVICE_HOST reaches that address.
  local service_loopback="127.96.${SERVICE_IP#*.*.}"
  api_sans="$api_sans,IP:$service_loopback"
  # The leaves are independent: make them in parallel (about 1 s saved per `up`).
  local -a jobs=()
  # Service-account token signing key pair (RSA: RS256 tokens, the common case).
  { openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$PKI/sa.key" 2>/dev/null &&
    openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null; } & jobs+=($!)
  gen_cert apiserver "/CN=kube-apiserver" server "$api_sans" & jobs+=($!)
  gen_cert kube-scheduler-serving "/CN=kube-scheduler" server "DNS:localhost,IP:127.0.0.1" & jobs+=($!)
  gen_cert kube-controller-manager-serving "/CN=kube-controller-manager" server "DNS:localhost,IP:127.0.0.1" & jobs+=($!)
  gen_cert admin "/O=system:masters/CN=tide-admin" client & jobs+=($!)
  gen_cert kube-scheduler "/CN=system:kube-scheduler" client & jobs+=($!)
  gen_cert kube-controller-manager "/CN=system:kube-controller-manager" client & jobs+=($!)
  gen_cert tide-node-agent "/O=tide:node-agents/CN=tide:node-agent" client & jobs+=($!)
  # The aggregation layer's client (front proxy); configuring it also fills the
  # requestheader CA that the scheduler and controller manager look up.
  gen_cert front-proxy-client "/CN=front-proxy-client" client & jobs+=($!)
  local j
  for j in "${jobs[@]}"; do wait "$j" || die "certificate generation failed (openssl)"; done
  for j in sa apiserver admin kube-scheduler kube-controller-manager tide-node-agent front-proxy-client; do
    [ -s "$PKI/$j.key" ] || die "certificate generation failed: no $PKI/$j.key"
  done
}

# write_kubeconfig FILE USER CERTNAME: self-contained (data embedded).
write_kubeconfig() {
  local file=$1 user=$2 cert=$3
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: tide-k8s
  cluster:
    server: $API_URL
    certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 <"$PKI/$cert.crt")
    client-key-data: $(base64 -w0 <"$PKI/$cert.key")
contexts:
- name: $user@tide-k8s
  context:
    cluster: tide-k8s
    user: $user
    namespace: default
current-context: $user@tide-k8s
EOF
  chmod 600 "$file"
}

# ---------------------------------------------------------------- nodes

# Default node i (0-based): on-demand CPU node, GPU node, two spot nodes, then more
# plain on-demand nodes.
default_node() {
  local i=$1 res="cpu=4,memory=8Gi"
  case $i in
    0) echo "tide-ondemand-0,$res" ;;
    1) echo "tide-gpu-0,$res,gpu=4" ;;
    2) echo "tide-spot-0,$res,label=tide.dev/spot=true,taint=tide.dev/spot=true:NoSchedule" ;;
    3) echo "tide-spot-1,$res,label=tide.dev/spot=true,taint=tide.dev/spot=true:NoSchedule" ;;
    *) echo "tide-ondemand-$(( i - 3 )),$res" ;;
  esac
}

node_ready() {
  kcurl GET "/api/v1/nodes/$1" 2>/dev/null | tr -d ' \n' | grep -q '"type":"Ready","status":"True"'
}
all_nodes_ready() {
  local spec
  while IFS= read -r spec; do
    [ -n "$spec" ] || continue
    node_ready "${spec%%,*}" || return 1
  done <"$RUN/nodes"
}

# ---------------------------------------------------------------- RBAC for the agent

setup_agent_rbac() {
  # Like system:node, but for one identity serving many nodes (the Node authorizer
  # and NodeRestriction only apply to system:node:<name> users, so they do not
  # confine it).
  kcreate /apis/rbac.authorization.k8s.io/v1/clusterroles '{
    "apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole",
    "metadata":{"name":"tide:node-agent"},
    "rules":[
      {"apiGroups":[""],"resources":["nodes"],"verbs":["get","list","watch","create","update","patch","delete"]},
      {"apiGroups":[""],"resources":["nodes/status"],"verbs":["get","update","patch"]},
      {"apiGroups":[""],"resources":["pods"],"verbs":["get","list","watch","create","delete","patch","update"]},
      {"apiGroups":[""],"resources":["pods/status"],"verbs":["get","update","patch"]},
      {"apiGroups":[""],"resources":["pods/eviction"],"verbs":["create"]},
      {"apiGroups":[""],"resources":["events"],"verbs":["create","update","patch"]},
      {"apiGroups":["events.k8s.io"],"resources":["events"],"verbs":["create","update","patch"]},
      {"apiGroups":["coordination.k8s.io"],"resources":["leases"],"verbs":["get","list","watch","create","update","patch","delete"]},
      {"apiGroups":[""],"resources":["configmaps","secrets","services","endpoints","namespaces","persistentvolumeclaims"],"verbs":["get","list","watch"]},
      {"apiGroups":[""],"resources":["serviceaccounts"],"verbs":["get","list","watch"]},
      {"apiGroups":[""],"resources":["serviceaccounts/token"],"verbs":["create"]},
      {"apiGroups":["discovery.k8s.io"],"resources":["endpointslices"],"verbs":["get","list","watch"]}
    ]}'
  kcreate /apis/rbac.authorization.k8s.io/v1/clusterrolebindings '{
    "apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding",
    "metadata":{"name":"tide:node-agent"},
    "roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"tide:node-agent"},
    "subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"Group","name":"tide:node-agents"}]}'
}

# ---------------------------------------------------------------- commands

cluster_healthy() {
  local c
  for c in etcd apiserver controller-manager scheduler; do alive "$c" || return 1; done
  apiserver_ready
}

cmd_up() {
  local nodes_n="" agent=1 require_agent=0 agent_args="" fresh=0 watch_cache=1
  local api_extra="" sched_extra="" cm_extra=""
  local -a node_specs=()
  while [ $# -gt 0 ]; do
    case $1 in
      --nodes) nodes_n=$2; shift ;;
      --nodes=*) nodes_n=${1#*=} ;;
      --node) node_specs+=("$2"); shift ;;
      --node=*) node_specs+=("${1#*=}") ;;
      --agent-args) agent_args=$2; shift ;;
      --agent-args=*) agent_args=${1#*=} ;;
      --no-agent) agent=0 ;;
      --require-agent) require_agent=1 ;;
      --no-watch-cache) watch_cache=0 ;;
      --apiserver-args) api_extra=$2; shift ;;
      --scheduler-args) sched_extra=$2; shift ;;
      --controller-manager-args) cm_extra=$2; shift ;;
      --fresh) fresh=1 ;;
      *) die "up: unknown option $1" ;;
    esac
    shift
  done
  if [ -n "$nodes_n" ] && ! [[ $nodes_n =~ ^[0-9]+$ ]]; then die "--nodes wants a number"; fi

  load_settings
  if [ -f "$RUN/cluster.env" ]; then
    if [ $fresh = 0 ] && cluster_healthy; then
      log "already up ($API_URL); nothing to do (use 'up --fresh' or 'down' to change options)"
      return 0
    fi
    log "found a stale or unwanted cluster in $RUN; taking it down first"
    cmd_down
    unset BIN ETCD_PORT ETCD_PEER_PORT API_PORT SCHED_PORT CM_PORT
    load_settings
  fi

  local t0; t0=$(date +%s.%N)
  local p
  for p in etcd etcdctl kube-apiserver kube-scheduler kube-controller-manager; do
    [ -x "$BIN/$p" ] || die "$BIN/$p is missing: run tests/k8s/build.sh first"
  done
  command -v openssl >/dev/null || die "openssl is missing (tests/k8s/build.sh installs it)"
  for p in "$ETCD_PORT" "$ETCD_PEER_PORT" "$API_PORT" "$SCHED_PORT" "$CM_PORT"; do
    if port_busy "$p"; then die "127.0.0.1:$p is already in use (another cluster? see TIDE_K8S_*_PORT)"; fi
  done

  # Never wipe a directory this script did not make (TIDE_K8S_RUN=$HOME by mistake).
  if [ -d "$RUN" ] && [ ! -e "$RUN/.tide-k8s-run" ] && [ -n "$(ls -A "$RUN")" ]; then
    die "$RUN exists, is not empty and is not a tide-k8s run directory; refusing to use it"
  fi
  rm -rf "$RUN"
  mkdir -p "$RUN/logs" "$RUN/pids" "$RUN/cmd" "$RUN/etcd-data"
  : >"$RUN/.tide-k8s-run"
  chmod 700 "$RUN/etcd-data"
  cat >"$RUN/cluster.env" <<EOF
BIN=$BIN
ETCD_PORT=$ETCD_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
API_PORT=$API_PORT
SCHED_PORT=$SCHED_PORT
CM_PORT=$CM_PORT
SERVICE_CIDR=$SERVICE_CIDR
SERVICE_IP=$SERVICE_IP
POD_CIDR=$POD_CIDR
SA_ISSUER=$SA_ISSUER
WATCH_CACHE=$watch_cache
EOF

  log "certificates and kubeconfigs in $RUN"
  gen_pki
  write_kubeconfig "$RUN/admin.kubeconfig" tide-admin admin
  write_kubeconfig "$RUN/kube-scheduler.kubeconfig" system:kube-scheduler kube-scheduler
  write_kubeconfig "$RUN/kube-controller-manager.kubeconfig" system:kube-controller-manager kube-controller-manager
  write_kubeconfig "$RUN/tide-node-agent.kubeconfig" tide:node-agent tide-node-agent

  # etcd: one member, plain HTTP on loopback (nothing else can reach it), no fsync:
  # the data dies with the run directory anyway.
  save_cmd etcd "$BIN/etcd" --name tide-k8s --data-dir "$RUN/etcd-data" \
    --listen-client-urls "$ETCD_URL" --advertise-client-urls "$ETCD_URL" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "tide-k8s=http://127.0.0.1:$ETCD_PEER_PORT" \
    --unsafe-no-fsync --log-level warn \
    --quota-backend-bytes $((2 << 30))
  log "starting etcd on $ETCD_URL"
  start_component etcd
  if ! wait_for 30 etcd_healthy; then tail_log etcd; die "etcd did not become healthy"; fi

  # shellcheck disable=SC2054 # (commas inside --authorization-mode)
  local -a api=("$BIN/kube-apiserver"
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$API_PORT"
    --etcd-servers="$ETCD_URL"
    --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key"
    --client-ca-file="$PKI/ca.crt"
    --authorization-mode=Node,RBAC
    --enable-admission-plugins=NodeRestriction
    --service-account-issuer="$SA_ISSUER"
    --service-account-key-file="$PKI/sa.pub"
    --service-account-signing-key-file="$PKI/sa.key"
    --service-cluster-ip-range="$SERVICE_CIDR"
    --requestheader-client-ca-file="$PKI/ca.crt"
    --requestheader-allowed-names=front-proxy-client
    --requestheader-username-headers=X-Remote-User
    --requestheader-group-headers=X-Remote-Group
    --requestheader-extra-headers-prefix=X-Remote-Extra-
    --proxy-client-cert-file="$PKI/front-proxy-client.crt"
    --proxy-client-key-file="$PKI/front-proxy-client.key"
    --endpoint-reconciler-type=none
    --allow-privileged=true
    --profiling=false
    --cert-dir="$PKI/apiserver-gen"
    --v=1)
  [ $watch_cache = 1 ] || api+=(--watch-cache=false)
  # shellcheck disable=SC2206
  [ -z "$api_extra" ] || api+=($api_extra)
  save_cmd apiserver "${api[@]}"
  log "starting kube-apiserver on $API_URL"
  start_component apiserver
  if ! wait_for 90 apiserver_ready; then tail_log apiserver; die "kube-apiserver did not get ready"; fi
  log "kube-apiserver ready after $(elapsed "$t0") s"

  local -a cm=("$BIN/kube-controller-manager"
    --kubeconfig="$RUN/kube-controller-manager.kubeconfig"
    --authentication-kubeconfig="$RUN/kube-controller-manager.kubeconfig"
    --authorization-kubeconfig="$RUN/kube-controller-manager.kubeconfig"
    --bind-address=127.0.0.1 --secure-port="$CM_PORT"
    --tls-cert-file="$PKI/kube-controller-manager-serving.crt"
    --tls-private-key-file="$PKI/kube-controller-manager-serving.key"
    --leader-elect=false
    --use-service-account-credentials=true
    --service-account-private-key-file="$PKI/sa.key"
    --root-ca-file="$PKI/ca.crt"
    --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key"
    --service-cluster-ip-range="$SERVICE_CIDR"
    --profiling=false
    --v=1)
  # shellcheck disable=SC2206
  [ -z "$cm_extra" ] || cm+=($cm_extra)
  save_cmd controller-manager "${cm[@]}"
  local -a sched=("$BIN/kube-scheduler"
    --kubeconfig="$RUN/kube-scheduler.kubeconfig"
    --authentication-kubeconfig="$RUN/kube-scheduler.kubeconfig"
    --authorization-kubeconfig="$RUN/kube-scheduler.kubeconfig"
    --bind-address=127.0.0.1 --secure-port="$SCHED_PORT"
    --tls-cert-file="$PKI/kube-scheduler-serving.crt"
    --tls-private-key-file="$PKI/kube-scheduler-serving.key"
    --leader-elect=false
    --profiling=false
    --v=1)
  # shellcheck disable=SC2206
  [ -z "$sched_extra" ] || sched+=($sched_extra)
  save_cmd scheduler "${sched[@]}"
  log "starting kube-controller-manager (:$CM_PORT) and kube-scheduler (:$SCHED_PORT)"
  start_component controller-manager
  start_component scheduler

  setup_agent_rbac

  # The cluster is usable once the system namespaces exist, the controller manager
  # has made the default service account and published the root CA, and both
  # components answer /healthz.
  if ! wait_for 60 bootstrap_done; then
    tail_log controller-manager; tail_log scheduler
    die "the cluster did not finish bootstrapping (namespaces / default service account)"
  fi
  log "control plane up after $(elapsed "$t0") s"

  # Nodes for the agent.
  : >"$RUN/nodes"
  if [ ${#node_specs[@]} -gt 0 ]; then
    printf '%s\n' "${node_specs[@]}" >"$RUN/nodes"
  else
    local i
    for i in $(seq 0 $(( ${nodes_n:-4} - 1 ))); do default_node "$i" >>"$RUN/nodes"; done
  fi

  local agent_bin=${TIDE_NODE_AGENT:-$REPO/build/tide-node-agent}
  echo "AGENT=$agent" >>"$RUN/cluster.env"
  if [ $agent = 0 ]; then
    log "node agent not started (--no-agent)"
  elif [ ! -x "$agent_bin" ]; then
    [ $require_agent = 0 ] || die "node agent $agent_bin not found (--require-agent)"
    log "node agent $agent_bin not found (not built yet?): continuing without nodes"
  elif [ ! -s "$RUN/nodes" ]; then
    log "no nodes asked for (--nodes 0): node agent not started"
  else
    local -a ag=("$agent_bin" --kubeconfig "$RUN/tide-node-agent.kubeconfig")
    local spec
    while IFS= read -r spec; do ag+=(--node "$spec"); done <"$RUN/nodes"
    ag+=(--pod-cidr "$POD_CIDR")
    # shellcheck disable=SC2206
    [ -z "$agent_args" ] || ag+=($agent_args)
    save_cmd agent "${ag[@]}"
    log "starting $agent_bin with $(wc -l <"$RUN/nodes") nodes"
    start_component agent
    if wait_for "${TIDE_K8S_AGENT_WAIT:-30}" all_nodes_ready; then
      log "all $(wc -l <"$RUN/nodes") nodes Ready"
    else
      tail_log agent
      [ $require_agent = 0 ] || die "the node agent's nodes did not get Ready"
      warn "the node agent's nodes are not all Ready (see $RUN/logs/agent.log); continuing"
    fi
  fi

  log "up in $(elapsed "$t0") s; KUBECONFIG=$RUN/admin.kubeconfig"
}

elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

etcd_healthy() {
  curl -s --max-time 2 "$ETCD_URL/health" 2>/dev/null | grep -q '"health":"true"'
}

bootstrap_done() {
  local ns
  for ns in default kube-system kube-public kube-node-lease; do
    [ "$(kcode GET "/api/v1/namespaces/$ns")" = 200 ] || return 1
  done
  [ "$(kcode GET /api/v1/namespaces/default/serviceaccounts/default)" = 200 ] || return 1
  [ "$(kcode GET /api/v1/namespaces/default/configmaps/kube-root-ca.crt)" = 200 ] || return 1
  [ "$(curl -s --max-time 2 --cacert "$PKI/ca.crt" -o /dev/null -w '%{http_code}' "https://127.0.0.1:$CM_PORT/healthz")" = 200 ] || return 1
  [ "$(curl -s --max-time 2 --cacert "$PKI/ca.crt" -o /dev/null -w '%{http_code}' "https://127.0.0.1:$SCHED_PORT/healthz")" = 200 ] || return 1
}

cmd_down() {
  load_settings
  if [ ! -d "$RUN" ]; then
    log "nothing to take down ($RUN does not exist)"
    return 0
  fi
  local c
  for c in agent scheduler controller-manager apiserver etcd; do
    if alive "$c"; then log "stopping $c"; fi
    stop_component "$c"
  done
  if [ -e "$RUN/.tide-k8s-run" ]; then
    rm -rf "$RUN"
    log "down; removed $RUN"
  else
    log "down; $RUN is not a tide-k8s run directory, left as it is"
  fi
}

cmd_env() {
  load_settings
  echo "export KUBECONFIG=$RUN/admin.kubeconfig"
  echo "export TIDE_K8S_RUN=$RUN"
  echo "export TIDE_K8S_CLUSTER=$SELF"
  echo "export TIDE_K8S_APISERVER=$API_URL"
  echo "export ETCDCTL_ENDPOINTS=$ETCD_URL"
}

cmd_status() {
  load_settings
  if [ ! -f "$RUN/cluster.env" ]; then
    echo "down ($RUN has no cluster)"
    return 1
  fi
  local c rc=0
  for c in $COMPONENTS; do
    if alive "$c"; then
      printf '%-20s running  pid %s\n' "$c" "$(pid_of "$c")"
    elif [ -f "$RUN/cmd/$c" ]; then
      printf '%-20s STOPPED\n' "$c"
      [ "$c" = agent ] || rc=1
    else
      printf '%-20s not started\n' "$c"
    fi
  done
  if apiserver_ready; then echo "apiserver            ready at $API_URL"; else echo "apiserver            NOT ready"; rc=1; fi
  echo "kubeconfig           $RUN/admin.kubeconfig"
  return $rc
}

# cmd_restart COMPONENT [--kill]
cmd_restart() {
  local c=$1 grace=""
  [ "${2:-}" = --kill ] && grace=0
  load_settings
  [ -f "$RUN/cluster.env" ] || die "no cluster in $RUN"
  prog_of "$c" >/dev/null
  [ -f "$RUN/cmd/$c" ] || die "$c was not started by 'up' (no saved command)"
  local t0; t0=$(date +%s.%N)
  stop_component "$c" $grace
  start_component "$c"
  case $c in
    apiserver) wait_for 90 apiserver_ready || { tail_log apiserver; die "kube-apiserver did not get ready"; } ;;
    etcd) wait_for 30 etcd_healthy || { tail_log etcd; die "etcd did not become healthy"; } ;;
  esac
  log "$c restarted in $(elapsed "$t0") s"
}

# etcdctl refuses --endpoints when ETCDCTL_ENDPOINTS (which `env` exports) is set.
etcdctl() { env -u ETCDCTL_ENDPOINTS "$BIN/etcdctl" --endpoints="$ETCD_URL" "$@"; }

cmd_compact() {
  local restart=0
  [ "${1:-}" = --restart ] && restart=1
  load_settings
  [ -f "$RUN/cluster.env" ] || die "no cluster in $RUN"
  # A write outside /registry moves the revision past anything a client has seen,
  # then everything up to it is compacted away.
  local rev
  rev=$(etcdctl put /tide-k8s/compact-marker "$(date +%s.%N)" -w json | sed -n 's/.*"revision":\([0-9]*\).*/\1/p')
  [ -n "$rev" ] || die "could not read etcd's revision"
  etcdctl compact "$rev" --physical >/dev/null
  log "etcd compacted at revision $rev"
  if [ $restart = 1 ]; then
    cmd_restart apiserver
  fi
  echo "$rev"
}

cmd_logs() {
  load_settings
  if [ -n "${1:-}" ]; then
    prog_of "$1" >/dev/null
    tail -n 100 "$RUN/logs/$1.log"
  else
    ls -l "$RUN/logs"
  fi
}

case ${1:-} in
  up) shift; cmd_up "$@" ;;
  down) cmd_down ;;
  env) cmd_env ;;
  status) cmd_status ;;
  restart-apiserver) cmd_restart apiserver "${2:-}" ;;
  restart) [ -n "${2:-}" ] || die "restart what?"; cmd_restart "$2" "${3:-}" ;;
  stop) [ -n "${2:-}" ] || die "stop what?"; load_settings; prog_of "$2" >/dev/null
        g=""; [ "${3:-}" = --kill ] && g=0; stop_component "$2" $g; log "$2 stopped" ;;
  start) [ -n "${2:-}" ] || die "start what?"; load_settings; start_component "$2"; log "$2 started" ;;
  compact) shift; cmd_compact "$@" ;;
  nodes) load_settings; cat "$RUN/nodes" ;;
  logs) shift; cmd_logs "$@" ;;
  -h|--help|help|'') awk 'NR > 1 && /^set -euo/ { exit } NR > 1' "$SELF" ;;
  *) die "unknown command $1 (up, down, env, status, restart-apiserver, restart, stop, start, compact, nodes, logs)" ;;
esac
