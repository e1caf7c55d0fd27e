//! Launches the FAKE of Azure DNS, Traffic Manager and Entra ID's token endpoint
//! (`testkit/fake_azure.py`) on loopback, over HTTPS with a certificate made for the run.
//! Azure publishes no emulator for these APIs, so the Azure provider is tested against this
//! fake; it checks every request strictly (see the script's header for what).

use std::collections::BTreeMap;
use std::process::{Child, Command};

use meridian_providers::azure::{AzureAuth, AzureCredentials, CustomCloud};
use serde_json::Value;

pub const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
pub const SUBSCRIPTION: &str = "00000000-0000-0000-0000-00000000000a";
pub const RESOURCE_GROUP: &str = "dns-rg";
pub const CLIENT_ID: &str = "meridian-test-client";
pub const CLIENT_SECRET: &str = "fake-client-secret";
/// What the fake accepts as a projected service-account token (workload identity).
pub const FEDERATED_TOKEN: &str = "eyJhbGciOiJSUzI1NiJ9.fake-service-account-token.signature";

/// The fake's options: quotas (Azure's defaults unless raised) and list page size.
#[derive(Debug, Clone)]
pub struct FakeAzureOptions {
    pub zones: Vec<String>,
    pub page_size: usize,
    pub max_record_sets: usize,
    pub max_profiles: usize,
}

impl Default for FakeAzureOptions {
    fn default() -> Self {
        FakeAzureOptions {
            zones: vec!["example.com".into()],
            page_size: 100,
            max_record_sets: 10_000,
            max_profiles: 200,
        }
    }
}

/// The fake Azure server; killed on drop (and by the kernel if the test process dies).
#[derive(Debug)]
pub struct FakeAzure {
    child: Child,
    https_port: u16,
    admin_port: u16,
    ca_pem: String,
    _files: tempfile::TempDir,
}

impl Drop for FakeAzure {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl FakeAzure {
    pub fn start(options: &FakeAzureOptions) -> Self {
        let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()])
            .expect("a certificate");
        let files = tempfile::tempdir().expect("a temporary directory");
        let cert = files.path().join("cert.pem");
        let key = files.path().join("key.pem");
        let ca_pem = certified.cert.pem();
        std::fs::write(&cert, &ca_pem).unwrap();
        std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fake_azure.py");
        let mut command = Command::new("setpriv");
        command
            .args(["--pdeathsig", "KILL", "--", "python3"])
            .arg(script)
            .arg("--cert")
            .arg(&cert)
            .arg("--key")
            .arg(&key)
            .args(["--tenant", TENANT, "--client-id", CLIENT_ID])
            .args([
                "--client-secret",
                CLIENT_SECRET,
                "--subscription",
                SUBSCRIPTION,
            ])
            .args(["--resource-group", RESOURCE_GROUP])
            .args(["--federated-token", FEDERATED_TOKEN])
            .args(["--page-size", &options.page_size.to_string()])
            .args(["--max-record-sets", &options.max_record_sets.to_string()])
            .args(["--max-profiles", &options.max_profiles.to_string()]);
        for zone in &options.zones {
            command.args(["--zone", zone]);
        }
        let (child, ports) = crate::spawn_fake(command);
        let [https_port, admin_port] = ports[..] else {
            panic!("the fake printed ports {ports:?}, not its HTTPS and admin ports");
        };
        FakeAzure {
            child,
            https_port,
            admin_port,
            ca_pem,
            _files: files,
        }
    }

    /// Where the fake serves Resource Manager and Entra ID.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}/", self.https_port)
    }

    /// Client-secret credentials for the fake, trusting its certificate.
    pub fn credentials(&self) -> AzureCredentials {
        AzureCredentials {
            tenant: TENANT.into(),
            subscription: SUBSCRIPTION.into(),
            resource_group: RESOURCE_GROUP.into(),
            auth: AzureAuth::ClientSecret {
                client_id: CLIENT_ID.into(),
                secret: CLIENT_SECRET.into(),
            },
            cloud: Some(CustomCloud {
                resource_manager: self.url(),
                authority_host: self.url(),
            }),
            extra_ca_pem: Some(self.ca_pem.clone()),
        }
    }

    /// The `azure.json` of a `kuadrant.io/azure` Secret for the fake. Where the fake is, the
    /// hub's admin says (`--azure-resource-manager` and `--azure-authority-host`: [`Self::url`]),
    /// never a Secret.
    pub fn azure_json(&self) -> String {
        serde_json::json!({
            "tenantId": TENANT,
            "subscriptionId": SUBSCRIPTION,
            "resourceGroup": RESOURCE_GROUP,
            "aadClientId": CLIENT_ID,
            "aadClientSecret": CLIENT_SECRET,
        })
        .to_string()
    }

    /// The certificate the fake serves (PEM), to trust.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    fn admin(&self, method: &str, path: &str) -> String {
        crate::loopback_request(self.admin_port, method, path)
    }

    /// API requests answered, by operation (`list-record-sets`, `put-profile`, `throttled`, …).
    pub fn requests(&self) -> BTreeMap<String, u64> {
        serde_json::from_str(&self.admin("GET", "/_fake/requests")).unwrap()
    }

    pub fn reset_requests(&self) {
        self.admin("POST", "/_fake/reset-requests");
    }

    /// Every record set (by zone) and profile, as the fake stores them.
    pub fn state(&self) -> Value {
        serde_json::from_str(&self.admin("GET", "/_fake/state")).unwrap()
    }

    /// Answers the next `n` API requests with 429 and `Retry-After: 1`.
    pub fn throttle(&self, n: u32) {
        self.admin("POST", &format!("/_fake/throttle?n={n}"));
    }
}
