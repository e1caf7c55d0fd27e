// The upstream CRD YAML the test bed installs, taken from these modules' own files.
// The OCM API and OpenShift API versions are the ones ../ocm builds its agents against.
module meridian.dev/testbed/crds

go 1.26.0

require (
	github.com/openshift/api v0.0.0-20251125174858-5cf710f68a92
	open-cluster-management.io/api v1.2.0
	sigs.k8s.io/gateway-api v1.5.1
)
