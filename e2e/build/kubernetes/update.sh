#!/usr/bin/env bash
# Re-pin the Kubernetes control plane to another release:
#
#   e2e/build/kubernetes/update.sh v1.37.2
#
# k8s.io/kubernetes requires its staging modules (k8s.io/api, k8s.io/apiserver, ...)
# at v0.0.0 and replaces them with ./staging directories. Replace directives of a
# dependency do not apply to us, so this writes one replace per staging module to
# the matching published tag (v1.X.Y -> v0.X.Y), taking the list from the release's
# own go.mod, then lets `go mod tidy` compute go.sum.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

version="${1:?usage: update.sh v1.X.Y}"
[[ $version =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || { echo "not a release tag: $version" >&2; exit 2; }
staging="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"

gomod="$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
[[ -f $gomod ]] || { echo "could not download k8s.io/kubernetes@$version" >&2; exit 1; }
goline="$(awk '$1 == "go" {print; exit}' "$gomod")"

mapfile -t modules < <(awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1}' "$gomod")
published=()
for m in "${modules[@]}"; do
  # A few staging modules (samples) are not published at every release; they
  # are not needed by the binaries we build.
  if go list -m "$m@$staging" >/dev/null 2>&1; then
    published+=("$m")
  else
    echo "skipping $m: $staging is not published" >&2
  fi
done

{
  cat <<EOF
// Pins the Kubernetes binaries used by the e2e harness (e2e/cluster.sh, e2e/node.sh).
// k8s.io/kubernetes replaces its staging modules with ./staging paths, which do not apply
// to a dependent module; every one of them is pinned here to the published v0.x tag that
// matches the Kubernetes release. Regenerate with ./update.sh <k8s version>.
module mcp-operator/e2e/build/kubernetes

$goline

godebug default=go1.${goline#go 1.}

tool (
	k8s.io/kubernetes/cmd/kube-apiserver
	k8s.io/kubernetes/cmd/kube-controller-manager
	k8s.io/kubernetes/cmd/kube-proxy
	k8s.io/kubernetes/cmd/kubectl
	k8s.io/kubernetes/cmd/kubelet
	k8s.io/kubernetes/cmd/kube-scheduler
)

require k8s.io/kubernetes $version

replace (
EOF
  for m in "${published[@]}"; do printf '\t%s => %s %s\n' "$m" "$m" "$staging"; done
  echo ")"
} >go.mod
sed -i 's/^godebug default=go1\.\([0-9]*\).*/godebug default=go1.\1/' go.mod
rm -f go.sum
go mod tidy
echo "pinned k8s.io/kubernetes $version (staging $staging); now run: e2e/cluster.sh build" >&2
