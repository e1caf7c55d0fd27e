//! Launches the FAKE of Cloud DNS's REST API (`testkit/fake_cloud_dns.py`) on loopback.
//! Google publishes no Cloud DNS emulator, so this is the one provider tested against a fake;
//! the fake checks every request body strictly (fields, values, routing policies, per-change
//! quotas, exact deletions).

use std::collections::BTreeMap;
use std::process::{Child, Command};

use serde_json::Value;

/// The fake Cloud DNS server; killed on drop (and by the kernel if the test process dies).
#[derive(Debug)]
pub struct FakeCloudDns {
    child: Child,
    port: u16,
    project: String,
}

impl Drop for FakeCloudDns {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl FakeCloudDns {
    /// Starts the fake for `project` with zone `example-com` for `example.com.`; `extra` are
    /// more flags (`--page-size N`, `--throttle-every N`).
    pub fn start(project: &str, extra: &[&str]) -> Self {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fake_cloud_dns.py");
        let mut command = Command::new("setpriv");
        command
            .args(["--pdeathsig", "KILL", "--", "python3"])
            .arg(script)
            .args(["--project", project, "--zone", "example-com=example.com."])
            .args(extra);
        let (child, ports) = crate::spawn_fake(command);
        FakeCloudDns {
            child,
            port: ports[0],
            project: project.to_string(),
        }
    }

    /// A GET answered by the fake, as JSON (a plain HTTP/1.1 request: the tests need no client).
    pub fn get(&self, path: &str) -> Value {
        serde_json::from_str(&crate::loopback_request(self.port, "GET", path)).unwrap()
    }

    /// Requests the fake answered, by method (`list-rrsets`, `create-change`, `throttled`, …).
    pub fn requests(&self) -> BTreeMap<String, u64> {
        serde_json::from_value(self.get("/_fake/requests")).unwrap()
    }

    /// The zone's record sets exactly as the fake stores them.
    pub fn record_set(&self, name: &str, record_type: &str) -> Value {
        let sets = self.get(&format!(
            "/dns/v1/projects/{}/managedZones/example-com/rrsets?name={name}&type={record_type}",
            self.project
        ));
        sets["rrsets"][0].clone()
    }

    /// The fake's loopback port.
    pub fn port(&self) -> u16 {
        self.port
    }
}
