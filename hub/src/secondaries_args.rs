//! The flags that let standard secondaries follow the embedded zones, shared by `run` and
//! `nameserver`: who may transfer (a TSIG key, or a network), and whom to NOTIFY.

use std::net::SocketAddr;
use std::path::PathBuf;

use ipnet::IpNet;
use meridian_nameserver::{ServerConfig, TsigKey};

#[derive(Debug, Clone, Default, clap::Args)]
pub struct SecondariesArgs {
    /// TSIG keys, in BIND's key-file format as `tsig-keygen` writes it (mounted from a
    /// Secret): a request signed with one may transfer the zones (AXFR, IXFR) and gets
    /// signed answers; NOTIFY is signed with the first.
    #[arg(long = "tsig-key-file", env = "MERIDIAN_DNS_TSIG_KEY_FILE")]
    pub tsig_key_file: Option<PathBuf>,
    /// A secondary to tell of every zone change by NOTIFY, `ADDRESS:PORT` (repeatable; in the
    /// environment, space-separated).
    #[arg(long = "notify", env = "MERIDIAN_DNS_NOTIFY", value_delimiter = ' ')]
    pub notify: Vec<SocketAddr>,
    /// A network allowed to transfer the zones without a key (repeatable; in the environment,
    /// space-separated). Prefer a key: addresses can be spoofed over UDP, and pods move.
    #[arg(
        long = "allow-transfer",
        env = "MERIDIAN_DNS_ALLOW_TRANSFER",
        value_delimiter = ' '
    )]
    pub allow_transfer: Vec<IpNet>,
}

impl SecondariesArgs {
    /// `config` with transfers and NOTIFY as these flags say.
    pub fn apply(&self, config: ServerConfig) -> anyhow::Result<ServerConfig> {
        let tsig_keys = match &self.tsig_key_file {
            None => Vec::new(),
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
                TsigKey::parse_key_file(&text)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
            }
        };
        Ok(ServerConfig {
            tsig_keys,
            notify: self.notify.clone(),
            transfer_allowed: self.allow_transfer.clone(),
            ..config
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::{Cli, Command};

    #[test]
    fn secondaries_flags_reach_the_server_config() {
        let dir = tempfile::tempdir().unwrap();
        let key_file = dir.path().join("transfer.key");
        std::fs::write(
            &key_file,
            "key \"meridian-transfer\" { algorithm hmac-sha256; secret \"c2VjcmV0\"; };\n",
        )
        .unwrap();
        let cli = Cli::try_parse_from([
            "meridian-hub",
            "nameserver",
            "--records",
            "plan.json",
            "--zone",
            "example.com",
            "--tsig-key-file",
            key_file.to_str().unwrap(),
            "--notify",
            "192.0.2.80:53",
            "--notify",
            "[2001:db8::9]:5353",
            "--allow-transfer",
            "10.0.0.0/8",
        ])
        .unwrap();
        let Command::Nameserver(args) = cli.command else {
            panic!("the nameserver command");
        };
        let config = args.secondaries.apply(Default::default()).unwrap();
        assert_eq!(config.tsig_keys.len(), 1);
        assert_eq!(config.tsig_keys[0].name, "meridian-transfer");
        assert_eq!(
            config.notify,
            [
                "192.0.2.80:53".parse().unwrap(),
                "[2001:db8::9]:5353".parse().unwrap()
            ]
        );
        assert_eq!(config.transfer_allowed, ["10.0.0.0/8".parse().unwrap()]);

        std::fs::write(
            &key_file,
            "key \"k\" { algorithm hmac-md5; secret \"YQ==\"; };",
        )
        .unwrap();
        let error = args.secondaries.apply(Default::default()).unwrap_err();
        assert!(
            error.to_string().contains("unsupported TSIG algorithm"),
            "{error}"
        );
        assert!(!error.to_string().contains("YQ=="), "no secret in errors");
    }
}
