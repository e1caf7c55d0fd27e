//! What the tests of `meridian-hub explain`, the live view and the monitoring files share:
//! the explained answer for a client against a live hub, a page loaded in headless Chromium,
//! a scrape of `/metrics`, and the metric names the chart's dashboard and alerts use.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use kube::Client;
use meridian_dns::model::RecordType;
use meridian_hub::explain_command::{Report, client, explain_snapshot};
use meridian_hub::insight::FleetSnapshot;
use meridian_nameserver::GeoDb;

use crate::{Error, repository_root};

/// `meridian-hub explain HOST --client SUBNET` against the live hub, as the command does it:
/// one list of each kind, the client located with `geoip`.
pub async fn explain_live(
    hub: &Client,
    host: &str,
    subnet: Option<&str>,
    geoip: &Path,
) -> Result<Report, Error> {
    let geo = GeoDb::open(geoip).map_err(|e| Error::Component(e.to_string()))?;
    let (who, notes) =
        client(subnet, None, None, Some(&geo)).map_err(|e| Error::Component(e.to_string()))?;
    let snapshot = FleetSnapshot::list(hub, Duration::from_secs(8)).await?;
    explain_snapshot(&snapshot, host, RecordType::A, who, notes)
        .map_err(|e| Error::Component(format!("explain {host}: {e}")))
}

/// The addresses an explanation says the client can get, sorted.
pub fn explained_addresses(report: &Report) -> Vec<String> {
    report.answer.answers.keys().cloned().collect()
}

/// Where tests keep what a person may want to look at afterwards (screenshots).
pub fn artifacts_dir() -> PathBuf {
    let dir = repository_root().join("target/test-artifacts");
    let _ = std::fs::create_dir_all(&dir);
    dir
}

/// Loads `url` in headless Chromium (Debian's `chromium-headless-shell`): the DOM after
/// rendering, and a screenshot written to `screenshot`.
pub fn browse(url: &str, screenshot: &Path) -> Result<String, Error> {
    let run = |args: &[&str]| {
        let profile = tempfile::tempdir().map_err(Error::io("a browser profile"))?;
        let output = Command::new("chromium-headless-shell")
            // The tests run as root, where Chromium's sandbox cannot start.
            .args(["--no-sandbox", "--disable-gpu", "--hide-scrollbars"])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .args(args)
            .arg(url)
            .output()
            .map_err(Error::io(
                "running chromium-headless-shell (make packages installs it)",
            ))?;
        if !output.status.success() {
            return Err(Error::Component(format!(
                "chromium-headless-shell {args:?} {url}: {}",
                String::from_utf8_lossy(&output.stderr)
            )));
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    };
    run(&[
        &format!("--screenshot={}", screenshot.display()),
        "--window-size=1600,1000",
    ])?;
    run(&["--dump-dom"])
}

/// `GET /metrics` from a hub's health address.
pub async fn scrape(health: SocketAddr) -> Result<String, Error> {
    Ok(get_as(health, "/metrics", None).await?.1)
}

/// `GET path` from a hub's HTTP address with `token` as the bearer token: the status line and
/// the body.
pub async fn get_as(
    address: SocketAddr,
    path: &str,
    token: Option<&str>,
) -> Result<(String, String), Error> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .map_err(Error::io("connecting to the hub's HTTP port"))?;
    let authorization = token
        .map(|token| format!("Authorization: Bearer {token}\r\n"))
        .unwrap_or_default();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: hub\r\n{authorization}Connection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .map_err(Error::io("asking the hub"))?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .map_err(Error::io("reading the hub's answer"))?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head.lines().next().unwrap_or_default().to_string();
    Ok((status, body.to_string()))
}

/// The metric families a scrape declares (its `# TYPE` lines).
pub fn declared_metrics(scrape: &str) -> BTreeSet<String> {
    scrape
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Every metric family the chart's dashboard and alert rules name (a histogram's `_bucket`,
/// `_sum` and `_count` series count as the histogram).
pub fn metrics_named_by_monitoring() -> BTreeSet<String> {
    let dir = repository_root().join("deploy/helm/meridian/files/monitoring");
    let mut named = BTreeSet::new();
    for file in ["dashboard.json", "alerts.yaml"] {
        let text = std::fs::read_to_string(dir.join(file)).expect("the chart's monitoring files");
        named.extend(metric_names(&text));
    }
    named
}

fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(start) = rest.find("meridian_") {
        let after = &rest[start..];
        let end = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        let name = &after[..end];
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .unwrap_or(name);
        // `meridian_` also starts the names of things that are not metrics (a dashboard's uid
        // `meridian-overview` has a dash, so it does not match).
        names.insert(family.to_string());
        rest = &after[end..];
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_names_are_found_in_expressions_with_histogram_suffixes_folded() {
        let text = r#"expr: histogram_quantile(0.9, sum by (le) (rate(meridian_failover_seconds_bucket[5m]))) > max(meridian_plans_held) "meridian_leader""#;
        let names = metric_names(text);
        assert_eq!(
            names,
            BTreeSet::from([
                "meridian_failover_seconds".to_string(),
                "meridian_plans_held".to_string(),
                "meridian_leader".to_string(),
            ])
        );
        assert_eq!(
            declared_metrics("# HELP x y\n# TYPE meridian_leader gauge\nmeridian_leader 1\n"),
            BTreeSet::from(["meridian_leader".to_string()])
        );
    }
}
