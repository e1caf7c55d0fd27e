# Meridian: `make demo` runs it, `make test` tests it. Both install what is missing first.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
CARGO ?= cargo
# Records each install and build step's time for .ci/run's table (scripts/timed.sh).
TIMED := bash scripts/timed.sh

# The test bed's per-version cache directory (outside the checkout; see e2e/testbed/build.sh).
export MERIDIAN_TESTBED_DIR := $(shell bash e2e/testbed/build.sh --print-dir)
# kubelet, kube-controller-manager, kube-scheduler and the pod sandbox's pause, for the test
# bed's nodes (e2e/testbed/nodes.sh).
export MERIDIAN_NODE_DIR := $(shell bash e2e/testbed/nodes.sh --print-dir)
# Helm, built from its Go module into the same cache (e2e/testbed/helm.sh).
export MERIDIAN_HELM := $(shell bash e2e/testbed/helm.sh --print-path)
# external-dns, built from its Go module beside its DNSEndpoint CRD, for the tests of sharing a
# zone with it (e2e/testbed/external-dns.sh).
export MERIDIAN_EXTERNAL_DNS_DIR := $(shell bash e2e/testbed/external-dns.sh --print-dir)
# Traefik, built from its Go module into the same cache: the spokes' Gateway API implementation
# in the real-traffic test, the demo and bench-failover (e2e/testbed/traefik.sh).
export MERIDIAN_TRAEFIK_DIR := $(shell bash e2e/testbed/traefik.sh --print-dir)
# The test bed's OCI registry (CNCF Distribution) and crane, which pushes images to it, built
# from their Go modules into the same cache (e2e/testbed/registry.sh).
export MERIDIAN_REGISTRY_DIR := $(shell bash e2e/testbed/registry.sh --print-dir)
# moto's server for the Route53 tests, in a virtualenv in the same cache (scripts/moto-venv.sh).
export MERIDIAN_MOTO_SERVER := $(shell bash scripts/moto-venv.sh --print-path)

# Debian packages the tests use: dig (dnsutils) as a real DNS client, BIND 9 for RFC2136 and,
# with Knot DNS, as secondaries of the embedded nameserver, and the container runtime of the
# test bed's nodes (containerd, runc, the CNI plugins, and ip for their bridges), and Unbound as
# the clients' recursive resolver in the real-traffic test and `make bench-failover`, and
# headless Chromium, the real browser the hub's live view is tested in; binutils' objcopy strips
# the test build's binaries for the images the tests run; PowerDNS with its SQLite backend (and
# sqlite3 to create its database) behind external-dns's webhook server, for the webhook provider.
TEST_PACKAGES := binutils dnsutils bind9 knot containerd runc containernetworking-plugins iproute2 unbound chromium-headless-shell pdns-server pdns-backend-sqlite3 sqlite3

.PHONY: help toolchain packages testbed test deps lint fmt crds demo demo-in-process images push bench-testbed bench-engine bench-dns bench-dns-flood bench-providers bench-convergence bench-failover bench-probes bench-hub-scale bench-distributed fuzz clean-testbed fresh-check fresh-check-full

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-17s %s\n", $$1, $$2}'

toolchain: ## Check the toolchains the build needs (Go, Rust with rustfmt and clippy, setpriv)
	@bash scripts/check-toolchain.sh

packages: ## Install the Debian packages, the moto venv, promtool and cargo-deny the tests use (once; a warm run asks no mirror)
	@$(TIMED) "Debian packages" bash scripts/debian-packages.sh $(TEST_PACKAGES)
	@$(TIMED) "moto venv (PyPI)" bash scripts/moto-venv.sh >/dev/null
	@$(TIMED) "promtool (Debian's prometheus, unpacked)" bash scripts/promtool.sh >/dev/null
	@$(TIMED) "cargo-deny (built from crates.io)" bash scripts/cargo-deny.sh >/dev/null

testbed: toolchain ## Build kube-apiserver, etcd, kubectl, OCM agents, node binaries, Helm, external-dns, Traefik, an OCI registry and crane; gather upstream CRDs (cached)
	@$(TIMED) "Go test bed (kube, etcd, OCM, CRDs)" bash e2e/testbed/build.sh >/dev/null
	@$(TIMED) "node binaries (kubelet, ...)" bash e2e/testbed/nodes.sh >/dev/null
	@$(TIMED) "Helm" bash e2e/testbed/helm.sh >/dev/null
	@$(TIMED) "external-dns" bash e2e/testbed/external-dns.sh >/dev/null
	@$(TIMED) "Traefik" bash e2e/testbed/traefik.sh >/dev/null
	@$(TIMED) "OCI registry and crane" bash e2e/testbed/registry.sh >/dev/null

deps: ## The dependency check alone: licenses, duplicate majors, banned crates and sources (deny.toml), offline
	@bash scripts/check-dependencies.sh

lint: toolchain ## rustfmt, clippy (warnings are errors) and no module circles
	$(CARGO) fmt --all -- --check
	python3 scripts/module-circles.py
	$(TIMED) "cargo clippy" $(CARGO) clippy --workspace --all-targets --locked -- -D warnings

# What the tests' build builds: every target of every crate, the benchmarks' programs included
# (they have no tests, but the build is also the lint, below).
BUILD_ARGS := --workspace --all-targets --locked
# The test binaries run: all but the benchmarks' empty harnesses.
TEST_ARGS := --workspace --exclude meridian-bench --all-targets --locked
# `make test` lints while it builds: clippy-driver is rustc with clippy's lints, so the workspace's
# crates compile once, linted, instead of once checked by `cargo clippy` (its own build of every
# dependency: 306 s of a cold run) and once more for the tests. Warnings are errors, as in
# `make lint`. Commands that must find the tests' build fresh take the same two variables (a
# plain `cargo test` afterwards compiles the workspace's crates again, not the dependencies).
CLIPPY_BUILD := RUSTC_WORKSPACE_WRAPPER="$$(rustc --print sysroot)/bin/clippy-driver" CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"

# The heaviest integration tests, by target name, run one at a time: those that start real nodes
# and run the images as pods (Meridian as pods in e2e/tests/install.rs and partition.rs, the
# demo app behind Traefik in real_traffic.rs, the nodes themselves in nodes.rs), and
# hub_controller.rs (two fleets of control planes at once, with agents as processes and 2 s
# heartbeats: beside a test with nodes its agents went quiet for over 8 s and its Lease, then
# 3 s, lapsed, and three of its tests failed).
HEAVY_TESTS := install,partition,real_traffic,nodes,hub_controller
# The tests that freeze a server (BIND, Route53's proxy, the API server) for two minutes and
# assert what the hub did meanwhile: they run with nothing beside them (twice, beside the tests
# with nodes, BIND's outage was not seen within two minutes, or an update BIND's kernel had
# queued landed after it woke).
ALONE_TESTS := outages
# The longest test binaries, longest first, so that the short ones fill in beside them at the end
# (measured: the table `make test` prints; the heavy tests are one lane).
FIRST_TESTS := outages,partition,distributed,real_traffic,hub_controller,install,coexistence,api,dnssec,routes

# The tests are built first, a step of its own so that its time and the tests' are told apart
# (`cargo build --all-targets` builds what `cargo test` would, and every binary the images hold);
# then scripts/test.sh packs the images from those binaries and runs the tests.
test: packages testbed toolchain ## Install what is missing, then lint, build and run every test
	$(CARGO) fmt --all -- --check
	@python3 scripts/module-circles.py --self-test >/dev/null && python3 scripts/module-circles.py
	$(TIMED) "cargo build (tests), linted by clippy" env $(CLIPPY_BUILD) $(CARGO) build $(BUILD_ARGS)
	@$(TIMED) "dependency check (cargo-deny, offline)" bash scripts/check-dependencies.sh
	@$(CLIPPY_BUILD) CARGO="$(CARGO)" bash scripts/test.sh "$(HEAVY_TESTS)" "$(ALONE_TESTS)" "$(FIRST_TESTS)" $(TEST_ARGS)

fmt: ## Format the Rust code
	$(CARGO) fmt --all

crds: ## Regenerate crds/, the chart's copy and deploy/hub/hub.yaml (tests fail when they are stale)
	$(CARGO) run --quiet --locked -p meridian-api --bin crdgen -- --out-dir crds
	$(CARGO) run --quiet --locked -p meridian-api --bin crdgen -- --out-dir deploy/helm/meridian/files/crds
	@helm=$$(bash e2e/testbed/helm.sh); { \
	  echo "# Meridian's hub, rendered from the Helm chart by \`make crds\` (do not edit; a test fails when stale):"; \
	  echo "# the chart with crds.install=false and no uninstall hook, for installing without Helm:"; \
	  echo "#   kubectl create namespace meridian-system && kubectl apply -f crds/ -f deploy/hub/hub.yaml"; \
	  echo "# (to uninstall, run \`meridian-hub uninstall\` in the namespace before deleting it)"; \
	  "$$helm" template meridian deploy/helm/meridian --namespace meridian-system --set crds.install=false --set uninstall.removeAgents=false; \
	} > deploy/hub/hub.yaml

demo: packages testbed images ## Run Meridian as pods: hub + 3 spokes with nodes, helm install, agents, a DNSPolicy, dig answers; Ctrl-C stops
	$(CARGO) run --quiet --locked -p meridian-e2e --bin meridian-testbed -- demo

demo-in-process: packages testbed ## The same with the hub and agents inside one process, on control planes without nodes (no images)
	$(CARGO) run --quiet --locked -p meridian-e2e --bin meridian-testbed -- demo --in-process

images: ## OCI images of meridian-hub and meridian-agent in target/images/, without a container engine (reproducible)
	@CARGO="$(CARGO)" $(TIMED) "images (release build)" bash scripts/images.sh

push: ## Push the images `make images` built and the chart to IMAGE_REGISTRY (see scripts/push.sh)
	@bash scripts/push.sh

bench-testbed: testbed ## Time one control plane's start, three at once, and one's memory
	$(CARGO) run --quiet --locked -p meridian-bench --bin bench-testbed

bench-engine: ## Build trees and plans for 10,000 hosts x 10 clusters x 3 geos on one core
	$(CARGO) run --quiet --locked --release -p meridian-bench --bin bench-engine

bench-dns: ## dnsperf against Meridian's nameserver, Knot, NSD, gdnsd and PowerDNS, same zone, alternating rounds
	@bash scripts/debian-packages.sh dnsutils dnsperf knot nsd gdnsd pdns-server pdns-backend-bind pdns-backend-geoip
	$(CARGO) run --quiet --locked --release -p meridian-bench --bin bench-dns

bench-dns-flood: ## Answers per second a client gets from the nameserver before and during a flood from 65,535 client prefixes, rate limiting on and off
	$(CARGO) run --quiet --locked --release -p meridian-bench --bin bench-dns-flood

bench-providers: packages ## API calls per phase for 1,000 hosts (and a drift verification): Route53 (moto), Cloud DNS and Azure (fakes), webhooks (external-dns to PowerDNS and BIND); PROVIDERS=azure for one
	@bash e2e/testbed/external-dns.sh >/dev/null
	$(CARGO) run --quiet --locked --release -p meridian-bench --bin bench-providers -- $(PROVIDERS)

bench-convergence: packages testbed ## Spoke address change → nameserver answer, p50/p99 over 25 changes
	$(CARGO) run --quiet --locked --release -p meridian-bench --bin bench-convergence

bench-failover: packages testbed images ## Clients through Unbound and real gateways: seconds from each failure until requests succeed, and back
	$(CARGO) run --quiet --locked --release -p meridian-bench --bin bench-failover

# DISTRIBUTED_SIZES: clusters, comma-separated; REFRESH: each agent's refresh seconds.
DISTRIBUTED_SIZES ?= 10,100,300
REFRESH ?= 60
bench-distributed: packages testbed ## Hub-less mode at DISTRIBUTED_SIZES clusters on one Route53 (moto, paced at 5 calls/s) and one BIND zone: calls, budget, change convergence
	$(CARGO) run --quiet --locked --release -p meridian-bench --bin bench-distributed -- --sizes $(DISTRIBUTED_SIZES) --refresh-seconds $(REFRESH)

bench-probes: ## One agent probing 5,000 leaves every 5 s: CPU and memory
	$(CARGO) run --quiet --locked --release -p meridian-bench --bin bench-probes

# SIZES: clusters x gateways, comma-separated. BASELINE: a git revision whose hub is measured in
# the same run (built once into the test-bed cache), e.g. BASELINE=c4cbd00; BASELINE_SIZES: the
# sizes it is measured at (all of SIZES when empty; the hub before the caches cannot converge at
# 1000x2000 in useful time).
# STRATEGY: the policies' routing strategy (simple or loadbalanced); DNSSEC=1 signs the zone.
# DELIVERY: who installs the agents (addon, the hub's default, or work: the hub's own works).
SIZES ?= 10x10,100x300,1000x2000,3000x6000
DELIVERY ?= addon
BASELINE ?=
BASELINE_SIZES ?=
STRATEGY ?= simple
DNSSEC ?=
bench-hub-scale: testbed ## The hub with synthetic fleets (SIZES): convergence, steady requests/s, CPU, RSS, address change → answer at the leader, a standby and an agent
	$(CARGO) build --quiet --locked --release -p meridian-hub
	@baseline=""; if [ -n "$(BASELINE)" ]; then baseline="--baseline-hub $$(bash scripts/baseline-hub.sh $(BASELINE))"; fi; \
	if [ -n "$(BASELINE_SIZES)" ]; then baseline="$$baseline --baseline-sizes $(BASELINE_SIZES)"; fi; \
	if [ -n "$(DNSSEC)" ]; then baseline="$$baseline --dnssec"; fi; \
	$(CARGO) run --quiet --locked --release -p meridian-bench --bin bench-hub-scale -- --sizes $(SIZES) --strategy $(STRATEGY) --agent-delivery $(DELIVERY) $$baseline

FUZZ_SECONDS ?= 300
fuzz: ## Fuzz the nameserver (raw packet → response) for FUZZ_SECONDS; needs the nightly toolchain
	@command -v cargo-fuzz >/dev/null || $(CARGO) install --locked cargo-fuzz
	cd nameserver/fuzz && $(CARGO) +nightly fuzz run respond -- -max_total_time=$(FUZZ_SECONDS)

fresh-check: ## Run every install step with empty caches in a temporary directory (Debian packages stay); fails at the first broken step
	@bash scripts/fresh-check.sh

fresh-check-full: ## The whole cold CI run (CI=true bash .ci/run) in a fresh clone of HEAD with empty caches, timed per step
	@bash scripts/fresh-check.sh --full

clean-testbed: ## Delete this version's test-bed cache (the next build starts cold)
	rm -rf "$(MERIDIAN_TESTBED_DIR)"
