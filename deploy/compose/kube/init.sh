#!/bin/sh
# The one-shot kube-init service of docker-compose.yml (DEV ONLY, see
# README.md here): waits for kube-apiserver, applies
# deploy/kubernetes/rbac.yaml as it is (namespace my-app, ServiceAccount
# my-app), and writes /out/kubeconfig.yaml with a token of that
# ServiceAccount, then /out/ready for the health check. Needs sh and curl.
set -eu
api=https://kube-apiserver:6443
admin="$(cut -d, -f1 /pki/tokens.csv)"
call() { # METHOD PATH [curl options...]
    method="$1" path="$2"
    shift 2
    curl -sS --fail-with-body --max-time 10 --cacert /pki/ca.crt \
        -H "Authorization: Bearer $admin" -X "$method" "$api$path" "$@"
}
# create PATH FILE: POSTs a YAML object; one that exists already is fine.
create() {
    code="$(curl -sS -o /tmp/out -w '%{http_code}' --max-time 10 --cacert /pki/ca.crt \
        -H "Authorization: Bearer $admin" -H 'Content-Type: application/yaml' \
        -X POST "$api$1" --data-binary "@$2")"
    case "$code" in
    201 | 409) ;;
    *) echo "kube-init: POST $1 answered $code: $(cat /tmp/out)" >&2; exit 1 ;;
    esac
}

rm -f /out/ready
for _ in $(seq 1 120); do
    call GET /readyz >/dev/null 2>&1 && break
    sleep 1
done
call GET /readyz >/dev/null

printf 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: my-app\n' >/tmp/ns.yaml
create /api/v1/namespaces /tmp/ns.yaml
printf 'apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: my-app\n  namespace: my-app\n' >/tmp/sa.yaml
create /api/v1/namespaces/my-app/serviceaccounts /tmp/sa.yaml
# rbac.yaml holds a Role, then a RoleBinding, separated by ---.
awk '/^---$/ {n++; next} {print > ("/tmp/rbac-" n ".yaml")}' /rbac/rbac.yaml
create /apis/rbac.authorization.k8s.io/v1/namespaces/my-app/roles /tmp/rbac-.yaml
create /apis/rbac.authorization.k8s.io/v1/namespaces/my-app/rolebindings /tmp/rbac-1.yaml

token="$(call POST /api/v1/namespaces/my-app/serviceaccounts/my-app/token \
    -H 'Content-Type: application/json' \
    --data '{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"expirationSeconds":604800}}' |
    tr -d '\n' | sed -n 's/.*"token": *"\([^"]*\)".*/\1/p')"
[ -n "$token" ] || { echo "kube-init: no token for ServiceAccount my-app" >&2; exit 1; }
ca="$(base64 </pki/ca.crt | tr -d '\n')"
cat >/out/kubeconfig.yaml.tmp <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
  - name: fencing-compose
    cluster:
      server: https://127.0.0.1:6443
      certificate-authority-data: $ca
users:
  - name: my-app
    user:
      token: $token
contexts:
  - name: my-app
    context:
      cluster: fencing-compose
      user: my-app
      namespace: my-app
current-context: my-app
KUBECONFIG
mv /out/kubeconfig.yaml.tmp /out/kubeconfig.yaml
touch /out/ready
echo "kube-init: wrote /out/kubeconfig.yaml for ServiceAccount my-app/my-app"
# Stay up: `docker compose up --wait` waits for this service's health check.
while :; do sleep 3600; done
