#!/usr/bin/env bash
# Builds external-dns from its Go module (./external-dns) into the user's cache, once per
# version and go.sum, beside its DNSEndpoint CRD from the same module, and prints the
# directory (`--print-dir` only prints it). The coexistence tests run it against the test
# bed's control planes, BIND and moto. Apart from build.sh so that its version does not
# select a new control-plane cache.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
module=sigs.k8s.io/external-dns
version=$(awk -v m="$module" '$1 == m { print $2; exit }' "$here/external-dns/go.mod")
inputs_hash=$(cat "$here/external-dns/go.mod" "$here/external-dns/go.sum" "$here/external-dns.sh" | sha256sum | cut -c1-12)
dir="${MERIDIAN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/meridian}/external-dns/$version-$inputs_hash"
if [[ "${1:-}" == "--print-dir" ]]; then
  echo "$dir"
  exit 0
fi
if [[ ! -x "$dir/external-dns" ]]; then
  echo "testbed: building external-dns $version from its Go module (the first build takes minutes)" >&2
  mkdir -p "$dir"
  started=$SECONDS
  cd "$here/external-dns"
  # `go mod download -json` fetches the module (verified against go.sum) when the module cache
  # lacks it and prints its directory either way; `go list -m` would print an empty Dir there.
  source_dir=$(GOTOOLCHAIN=local GOFLAGS=-mod=readonly go mod download -json "$module" |
    sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [[ -d "$source_dir" ]] || { echo "testbed: could not download $module $version" >&2; exit 1; }
  # The module cache is read-only; the copy must not be, or a rerun could not overwrite it.
  install -m 0644 "$source_dir/config/crd/standard/dnsendpoints.externaldns.k8s.io.yaml" "$dir/"
  # `--webhook-server` listens on 127.0.0.1:8888, written into the source. Tests run several
  # at once, so the copy takes the address from EXTERNAL_DNS_WEBHOOK_LISTEN when it is set (the
  # only change to external-dns's behaviour; unset, it is upstream's).
  # With the providers the tests and the webhook name only: its provider factory links all 28
  # and their cloud SDKs, about 40 % of the Go files the build compiles. The module is copied
  # with that one file replaced, and the build takes it through a copy of go.mod with one more
  # replace line.
  # The copies go whether the build succeeds or not (the module cache's modes are read-only;
  # the copy's are not, so a rerun can always remove them).
  trap 'rm -rf "$dir/source" "$dir/build"' EXIT
  rm -rf "$dir/source" "$dir/build"
  mkdir -p "$dir/build"
  cp -r --no-preserve=mode "$source_dir" "$dir/source"
  rm "$dir/source/provider/factory/"*.go
  sed -i 's|webhookapi.StartHTTPApi(prvdr, nil, cfg.WebhookProviderReadTimeout, cfg.WebhookProviderWriteTimeout, "127.0.0.1:8888")|webhookapi.StartHTTPApi(prvdr, nil, cfg.WebhookProviderReadTimeout, cfg.WebhookProviderWriteTimeout, cmp.Or(os.Getenv("EXTERNAL_DNS_WEBHOOK_LISTEN"), "127.0.0.1:8888"))|; s|^import (|import (\n\t"cmp"|' "$dir/source/controller/execute.go"
  grep -q EXTERNAL_DNS_WEBHOOK_LISTEN "$dir/source/controller/execute.go" ||
    { echo "testbed: external-dns's webhook listen address moved; update external-dns.sh" >&2; exit 1; }
  cat > "$dir/source/provider/factory/provider.go" <<'GO'
// Package factory: the test bed's copy of external-dns with five providers (see external-dns.sh).
package factory

import (
	"context"
	"fmt"

	"sigs.k8s.io/external-dns/endpoint"
	"sigs.k8s.io/external-dns/pkg/apis/externaldns"
	"sigs.k8s.io/external-dns/provider"
	"sigs.k8s.io/external-dns/provider/aws"
	"sigs.k8s.io/external-dns/provider/inmemory"
	"sigs.k8s.io/external-dns/provider/pdns"
	"sigs.k8s.io/external-dns/provider/rfc2136"
	"sigs.k8s.io/external-dns/provider/webhook"
)

// Select makes the provider cfg names, cached when cfg says so.
func Select(ctx context.Context, cfg *externaldns.Config, filter *endpoint.DomainFilter) (provider.Provider, error) {
	var made provider.Provider
	var err error
	switch cfg.Provider {
	case externaldns.ProviderAWS:
		made, err = aws.New(ctx, cfg, filter)
	case externaldns.ProviderInMemory:
		made, err = inmemory.New(ctx, cfg, filter)
	case externaldns.ProviderPDNS:
		made, err = pdns.New(ctx, cfg, filter)
	case externaldns.ProviderRFC2136:
		made, err = rfc2136.New(ctx, cfg, filter)
	case externaldns.ProviderWebhook:
		made, err = webhook.New(ctx, cfg, filter)
	default:
		return nil, fmt.Errorf("dns provider %q is not built into the test bed's external-dns", cfg.Provider)
	}
	if err != nil {
		return nil, err
	}
	if made != nil && cfg.ProviderCacheTime > 0 {
		return provider.NewCachedProvider(made, cfg.ProviderCacheTime), nil
	}
	return made, nil
}
GO
  { cat go.mod; echo "replace $module => $dir/source"; } > "$dir/build/go.mod"
  cp go.sum "$dir/build/go.sum"
  GOTOOLCHAIN=local GOFLAGS="-mod=readonly -trimpath -buildvcs=false" \
    go build -modfile="$dir/build/go.mod" \
    -ldflags "-s -w -X $module/pkg/apis/externaldns.Version=$version" \
    -o "$dir/.external-dns.partial" "$module"
  mv "$dir/.external-dns.partial" "$dir/external-dns"
  echo "testbed: built external-dns in $((SECONDS - started)) s" >&2
fi
echo "$dir"
