#!/usr/bin/env bash
# Smoke test of the k8s test cluster, through nothing but curl and the kubeconfig in
# $KUBECONFIG (its embedded CA and client certificate): the version is the one
# built, RBAC is on, service-account tokens are issued and accepted, the scheduler
# and the controller manager do their work, and a namespace can be created and
# deleted. Exits 0 on success; prints one line per check.
set -euo pipefail

: "${KUBECONFIG:?KUBECONFIG must name the admin kubeconfig (cluster.sh env)}"
WANT_MINOR=${TIDE_K8S_WANT_VERSION:-v1.36.}
RUN=${TIDE_K8S_RUN:-$(dirname "$KUBECONFIG")}
TMP=$(mktemp -d)
NS=tide-smoke-$$
pass=0
fail=0

cleanup() {
  # Best effort: do not leave the namespace behind if a check failed midway.
  [ -f "$TMP/ca.crt" ] && k DELETE "/api/v1/namespaces/$NS" -o /dev/null 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

ok() { echo "ok   - $*"; pass=$((pass + 1)); }
bad() { echo "FAIL - $*"; fail=$((fail + 1)); }

# The kubeconfig's fields, decoded from the file itself (what a client does).
field() { sed -n "s/^ *$1: *//p" "$2" | head -n1; }
SERVER=$(field server "$KUBECONFIG")
field certificate-authority-data "$KUBECONFIG" | base64 -d >"$TMP/ca.crt"
field client-certificate-data "$KUBECONFIG" | base64 -d >"$TMP/admin.crt"
field client-key-data "$KUBECONFIG" | base64 -d >"$TMP/admin.key"
[ -n "$SERVER" ] && [ -s "$TMP/admin.crt" ] || { echo "cannot read $KUBECONFIG"; exit 1; }

# k METHOD PATH [curl args]: as the admin.
k() {
  local m=$1 p=$2; shift 2
  curl -sS --max-time 15 --cacert "$TMP/ca.crt" --cert "$TMP/admin.crt" --key "$TMP/admin.key" \
    -X "$m" -H 'Content-Type: application/json' "$@" "$SERVER$p"
}
code() { local m=$1 p=$2; shift 2; k "$m" "$p" -o /dev/null -w '%{http_code}' "$@"; }
# is WANT PATH: GET PATH answers HTTP WANT (re-evaluated on every poll).
is() { [ "$(code GET "$2" 2>/dev/null)" = "$1" ]; }
# poll SECONDS COMMAND...
poll() {
  local end=$(( $(date +%s) + $1 )); shift
  until "$@"; do [ "$(date +%s)" -lt "$end" ] || return 1; sleep 0.3; done
}

# 1. version
v=$(k GET /version | tr -d ' \n')
gv=$(sed -n 's/.*"gitVersion":"\([^"]*\)".*/\1/p' <<<"$v")
case $gv in "$WANT_MINOR"*) ok "/version reports $gv" ;; *) bad "/version reports '$gv', want $WANT_MINOR*: $v" ;; esac

# 2. readiness, and anonymous requests are not admin
[ "$(code GET /readyz)" = 200 ] && ok "/readyz is 200" || bad "/readyz not 200"
c=$(curl -s --max-time 5 --cacert "$TMP/ca.crt" -o /dev/null -w '%{http_code}' "$SERVER/api/v1/secrets")
[ "$c" = 403 ] || [ "$c" = 401 ] && ok "anonymous list of secrets refused ($c)" || bad "anonymous list of secrets gave $c"

# 3. namespace create
c=$(code POST /api/v1/namespaces --data "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"$NS\"}}")
[ "$c" = 201 ] && ok "namespace $NS created" || bad "namespace create gave $c"
[ "$(code GET "/api/v1/namespaces/$NS")" = 200 ] && ok "namespace $NS readable" || bad "namespace $NS not readable"

# 4. the controller manager makes the namespace's default service account
if poll 30 is 200 "/api/v1/namespaces/$NS/serviceaccounts/default"; then
  ok "service account $NS/default created by the controller manager"
else
  bad "no default service account in $NS"
fi

# 5. token issuance (TokenRequest) and authentication with that token
tok=$(k POST "/api/v1/namespaces/$NS/serviceaccounts/default/token" \
  --data '{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"expirationSeconds":600}}' |
  tr -d ' \n' | sed -n 's/.*"token":"\([^"]*\)".*/\1/p')
if [ -n "$tok" ]; then
  ok "TokenRequest issued a token"
  who=$(curl -sS --max-time 10 --cacert "$TMP/ca.crt" -H "Authorization: Bearer $tok" \
    -H 'Content-Type: application/json' -X POST "$SERVER/apis/authentication.k8s.io/v1/selfsubjectreviews" \
    --data '{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}' | tr -d ' \n')
  case $who in
    *"\"username\":\"system:serviceaccount:$NS:default\""*) ok "the token authenticates as system:serviceaccount:$NS:default" ;;
    *) bad "SelfSubjectReview with the token: $who" ;;
  esac
  c=$(curl -s --max-time 10 --cacert "$TMP/ca.crt" -H "Authorization: Bearer $tok" -o /dev/null -w '%{http_code}' \
    "$SERVER/api/v1/namespaces/kube-system/secrets")
  [ "$c" = 403 ] && ok "RBAC: the service account may not list kube-system secrets (403)" || bad "RBAC: service account got $c listing kube-system secrets"
else
  bad "TokenRequest gave no token"
fi

# 6. the controller manager reconciles a Deployment into a ReplicaSet and a Pod, and
# the scheduler acts on the Pod (binds it to a node, or marks it unschedulable).
dep='{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"smoke"},
 "spec":{"replicas":1,"selector":{"matchLabels":{"app":"smoke"}},
 "template":{"metadata":{"labels":{"app":"smoke"}},
 "spec":{"containers":[{"name":"c","image":"tide.invalid/smoke:none"}],
 "nodeSelector":{"tide.dev/smoke-no-such-node":"x"}}}}}'
c=$(code POST "/apis/apps/v1/namespaces/$NS/deployments" --data "$dep")
[ "$c" = 201 ] && ok "deployment created" || bad "deployment create gave $c"
pod_made() { k GET "/api/v1/namespaces/$NS/pods?labelSelector=app%3Dsmoke" | tr -d ' \n' | grep -q '"items":\[{'; }
if poll 30 pod_made; then ok "controller manager made the deployment's pod"; else bad "no pod for the deployment"; fi
scheduled() { k GET "/api/v1/namespaces/$NS/pods?labelSelector=app%3Dsmoke" | tr -d ' \n' | grep -q '"type":"PodScheduled",[^}]*"status":"False"[^}]*"reason":"Unschedulable"'; }
if poll 30 scheduled; then ok "scheduler marked the pod Unschedulable (it asks for a node that is not there)"; else bad "scheduler did not act on the pod"; fi

# 7. the node agent identity: may list nodes, may not delete namespaces
if [ -f "$RUN/tide-node-agent.kubeconfig" ]; then
  AK=$RUN/tide-node-agent.kubeconfig
  field client-certificate-data "$AK" | base64 -d >"$TMP/agent.crt"
  field client-key-data "$AK" | base64 -d >"$TMP/agent.key"
  ac() { curl -s --max-time 10 --cacert "$TMP/ca.crt" --cert "$TMP/agent.crt" --key "$TMP/agent.key" -o /dev/null -w '%{http_code}' "$@"; }
  [ "$(ac "$SERVER/api/v1/nodes")" = 200 ] && ok "agent identity may list nodes" || bad "agent identity may not list nodes"
  [ "$(ac -X DELETE "$SERVER/api/v1/namespaces/$NS")" = 403 ] && ok "agent identity may not delete namespaces" || bad "agent identity could delete a namespace"
fi

# 8. namespace delete; the namespace controller empties and removes it
c=$(code DELETE "/api/v1/namespaces/$NS")
case $c in 200|202) ok "namespace delete accepted ($c)" ;; *) bad "namespace delete gave $c" ;; esac
if poll 60 is 404 "/api/v1/namespaces/$NS"; then ok "namespace $NS gone"; else bad "namespace $NS still there after 60 s"; fi

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
