//! The test bed's OCI registry: CNCF Distribution's `registry` on a loopback port, which the
//! nodes' containerd pulls from (plain HTTP, as containerd allows for a loopback host), `crane`
//! pushing the images `make images` built, and `helm push` the packaged chart. Both built from
//! their Go modules by `e2e/testbed/registry.sh`.
//!
//! It asks for credentials, as a private registry does: a user the registry makes at its first
//! start (htpasswd), whose password it logs once. `crane` and `helm` log in with it; the
//! clusters get it as `kubernetes.io/dockerconfigjson` Secrets ([`Registry::pull_secret`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::images::BuiltImage;
use crate::ports::free_loopback_port;
use crate::process::ManagedProcess;
use crate::{Error, helm_command, repository_root};

/// Environment variable naming the directory `e2e/testbed/registry.sh` builds into.
pub const REGISTRY_DIR_ENV: &str = "MERIDIAN_REGISTRY_DIR";
/// The repository path the images are pushed under, as a release's would be.
pub const IMAGE_NAMESPACE: &str = "meridian-dev";
/// Where the chart is pushed (`oci://<registry>/charts/meridian`).
pub const CHART_REPOSITORY: &str = "charts";

/// A running registry. Dropping it stops it and deletes what it stored.
#[derive(Debug)]
pub struct Registry {
    /// `127.0.0.1:<port>`: the host part of every reference pushed here.
    pub host: String,
    /// The user the registry made, and its password.
    username: String,
    password: String,
    tools: PathBuf,
    _process: ManagedProcess,
    dir: tempfile::TempDir,
}

impl Registry {
    /// Starts a registry storing into a directory of its own, and waits until it answers.
    pub async fn start() -> Result<Self, Error> {
        let tools = tools_dir()?;
        let dir = tempfile::tempdir().map_err(Error::io("creating the registry's directory"))?;
        let host = format!("127.0.0.1:{}", free_loopback_port()?);
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {host}\nauth:\n  htpasswd:\n    realm: meridian-testbed\n    path: {}\n",
                dir.path().join("storage").display(),
                dir.path().join("htpasswd").display(),
            ),
        )
        .map_err(Error::io("writing the registry's configuration"))?;
        let process = ManagedProcess::spawn(
            "registry",
            &tools.join("registry"),
            &["serve".to_string(), config.display().to_string()],
            &dir.path().join("registry.log"),
        )?;
        let url = format!("http://{host}/v2/");
        // Without credentials it answers 401, which is answering.
        crate::eventually("the registry answers", crate::DEFAULT_PATIENCE, || async {
            let code = Command::new("curl")
                .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", &url])
                .output()
                .map(|out| String::from_utf8_lossy(&out.stdout).to_string())
                .unwrap_or_default();
            Ok((code == "401").then_some(()))
        })
        .await?;
        // "htpasswd is missing, provisioning with default user" ... password=<p> ... user=docker
        let log = std::fs::read_to_string(dir.path().join("registry.log"))
            .map_err(Error::io("reading the registry's log"))?;
        let field = |name: &str| {
            log.split_whitespace()
                .find_map(|word| word.strip_prefix(&format!("{name}=")))
                .map(|value| value.trim_matches('"').to_string())
        };
        let (Some(username), Some(password)) = (field("user"), field("password")) else {
            return Err(Error::Component(format!(
                "the registry logged no user it made: {log}"
            )));
        };
        let registry = Registry {
            host,
            username,
            password,
            tools,
            _process: process,
            dir,
        };
        run_with_input(
            registry
                .crane()
                .args(["auth", "login", &registry.host, "-u", &registry.username])
                .arg("--password-stdin"),
            &registry.password,
        )?;
        run_with_input(
            helm_command()?
                .args([
                    "registry",
                    "login",
                    &registry.host,
                    "--plain-http",
                    "--username",
                ])
                .arg(&registry.username)
                .arg("--password-stdin")
                .arg("--registry-config")
                .arg(registry.helm_registry_config()),
            &registry.password,
        )?;
        Ok(registry)
    }

    /// `crane`, logged in to this registry (its own Docker configuration).
    fn crane(&self) -> Command {
        let mut command = Command::new(self.tools.join("crane"));
        command.env("DOCKER_CONFIG", self.dir.path().join("docker"));
        command
    }

    /// Helm's registry configuration holding this registry's login: pass it as
    /// `--registry-config` to `helm install`, `upgrade` and `push`.
    pub fn helm_registry_config(&self) -> PathBuf {
        self.dir.path().join("helm-registry.json")
    }

    /// A `kubernetes.io/dockerconfigjson` Secret's `.dockerconfigjson` for this registry.
    pub fn pull_secret(&self) -> String {
        use base64::Engine;
        let auth = base64::engine::general_purpose::STANDARD
            .encode(format!("{}:{}", self.username, self.password));
        serde_json::json!({ "auths": { &self.host: {
            "username": self.username, "password": self.password, "auth": auth,
        } } })
        .to_string()
    }

    /// The registry path images are pushed under, `<host>/meridian-dev` (the chart's
    /// `image.registry`).
    pub fn image_registry(&self) -> String {
        format!("{}/{IMAGE_NAMESPACE}", self.host)
    }

    /// Where `image` is pushed: its repository's last part under [`Registry::image_registry`],
    /// with `tag`.
    pub fn reference(&self, image: &BuiltImage, tag: &str) -> String {
        let name = image
            .repository()
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string();
        format!("{}/{name}:{tag}", self.image_registry())
    }

    /// Pushes `image`'s archive as [`Registry::reference`] with each of `tags`; returns the
    /// first reference.
    pub fn push_image(&self, image: &BuiltImage, tags: &[&str]) -> Result<String, Error> {
        // crane reads an OCI layout from a directory.
        let layout = self.dir.path().join(format!("layout-{}", image.digest));
        std::fs::create_dir_all(&layout).map_err(Error::io("creating an image layout"))?;
        run(Command::new("tar")
            .arg("-xf")
            .arg(&image.archive)
            .arg("-C")
            .arg(&layout))?;
        let first = self.reference(image, tags[0]);
        run(self
            .crane()
            .args(["push", "--insecure"])
            .arg(&layout)
            .arg(&first))?;
        for tag in &tags[1..] {
            run(self.crane().args(["tag", "--insecure", &first, tag]))?;
        }
        std::fs::remove_dir_all(&layout).map_err(Error::io("removing an image layout"))?;
        Ok(first)
    }

    /// Copies the image `from` (a reference in this registry) to `path` (`REPOSITORY:TAG`)
    /// beside it, as a mirror holds an image; returns the new reference.
    pub fn mirror(&self, from: &str, path: &str) -> Result<String, Error> {
        let to = format!("{}/{path}", self.host);
        run(self.crane().args(["copy", "--insecure", from, &to]))?;
        Ok(to)
    }

    /// Packages the repository's chart and pushes it; returns its `oci://` reference and
    /// version (the chart's own).
    pub fn push_chart(&self) -> Result<(String, String), Error> {
        let chart = repository_root().join("deploy/helm/meridian");
        let packaged = self.dir.path().join("charts");
        std::fs::create_dir_all(&packaged).map_err(Error::io("creating a chart directory"))?;
        let output = run(helm_command()?
            .arg("package")
            .arg(&chart)
            .arg("--destination")
            .arg(&packaged))?;
        // "Successfully packaged chart and saved it to: <path>"
        let archive = output
            .rsplit(": ")
            .next()
            .map(|path| PathBuf::from(path.trim()))
            .filter(|path| path.exists())
            .ok_or_else(|| Error::Component(format!("helm package said: {output}")))?;
        let version = chart_version(&archive)?;
        let repository = format!("oci://{}/{CHART_REPOSITORY}", self.host);
        run(helm_command()?
            .arg("push")
            .arg(&archive)
            .arg(&repository)
            .arg("--plain-http")
            .arg("--registry-config")
            .arg(self.helm_registry_config()))?;
        Ok((format!("{repository}/meridian"), version))
    }

    /// The repositories and tags the registry holds (its catalog).
    pub fn catalog(&self) -> Result<String, Error> {
        run(self.crane().args(["catalog", "--insecure", &self.host]))
    }
}

/// `meridian-<version>.tgz` → `<version>`.
fn chart_version(archive: &Path) -> Result<String, Error> {
    archive
        .file_stem()
        .and_then(|stem| stem.to_str())
        .and_then(|stem| stem.strip_prefix("meridian-"))
        .map(str::to_string)
        .ok_or_else(|| Error::Component(format!("a chart archive named {}", archive.display())))
}

/// Runs `command` with `input` on its standard input (a password kept off the command line).
fn run_with_input(command: &mut Command, input: &str) -> Result<String, Error> {
    use std::io::Write;
    let mut child = command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| Error::Component(format!("running {command:?}: {e}")))?;
    child
        .stdin
        .take()
        .expect("a piped stdin")
        .write_all(input.as_bytes())
        .map_err(Error::io("writing to a command's input"))?;
    let output = child.wait_with_output();
    stdout_of(command, output)
}

fn run(command: &mut Command) -> Result<String, Error> {
    let output = command.output();
    stdout_of(command, output)
}

/// What `command` printed, or why it failed (what it printed on stderr).
fn stdout_of(
    command: &Command,
    output: std::io::Result<std::process::Output>,
) -> Result<String, Error> {
    let output = output.map_err(|e| Error::Component(format!("running {command:?}: {e}")))?;
    if !output.status.success() {
        return Err(Error::Component(format!(
            "{command:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    Ok(String::from_utf8_lossy(&output.stdout).to_string())
}

/// Where `registry` and `crane` are: `MERIDIAN_REGISTRY_DIR`, else what the script says.
fn tools_dir() -> Result<PathBuf, Error> {
    let dir = crate::assets::testbed_dir(REGISTRY_DIR_ENV, "e2e/testbed/registry.sh")?;
    let registry = dir.join("registry");
    if !registry.exists() {
        return Err(Error::MissingAsset {
            path: registry,
            hint: "the OCI registry and crane (`make testbed` builds them)",
        });
    }
    Ok(dir)
}
