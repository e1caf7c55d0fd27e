//! Who Route53 calls are made as: keys from a Secret, or this process's own AWS identity (the
//! default credential chain: web identity for IRSA, EKS Pod Identity, the instance's role), and
//! optionally a role assumed from either (with an external ID). Temporary credentials are
//! refreshed by the SDK's identity cache before they expire.

use aws_config::BehaviorVersion;
use aws_config::default_provider::credentials::DefaultCredentialsChain;
use aws_config::provider_config::ProviderConfig;
use aws_config::sts::AssumeRoleProvider;
use aws_credential_types::Credentials;
use aws_credential_types::provider::SharedCredentialsProvider;
use aws_sdk_route53::config::{Region, SharedHttpClient};
use aws_smithy_http_client::tls;

/// The HTTP client of every AWS client (Route53, STS): hyper 1 and rustls on ring, the stack
/// kube uses (the SDK's default would add aws-lc-rs to the build).
pub fn http_client() -> SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https()
}

/// Where the calls' credentials come from.
#[derive(Clone, PartialEq, Eq)]
pub enum AwsSource {
    /// An access key from a Secret.
    Keys {
        access_key_id: String,
        secret_access_key: String,
    },
    /// This process's own identity, through the AWS default credential chain.
    Ambient,
}

impl std::fmt::Debug for AwsSource {
    // Keys never reach a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AwsSource::Keys { .. } => f.write_str("Keys"),
            AwsSource::Ambient => f.write_str("Ambient"),
        }
    }
}

/// A role assumed from the source's credentials (STS AssumeRole).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssumedRole {
    pub role_arn: String,
    /// The role's trust policy may require it: it tells the role on whose behalf it is
    /// assumed (the confused-deputy guard).
    pub external_id: Option<String>,
    pub session_name: String,
}

/// Everything that decides the identity of a zone's calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsIdentity {
    pub source: AwsSource,
    pub assume_role: Option<AssumedRole>,
    pub region: String,
    /// An STS-compatible endpoint (moto in tests); the region's STS when `None`.
    pub sts_endpoint: Option<String>,
}

/// The credentials provider for `identity`.
pub async fn credentials_provider(identity: &AwsIdentity) -> SharedCredentialsProvider {
    let region = Region::new(identity.region.clone());
    let source = match &identity.source {
        AwsSource::Keys {
            access_key_id,
            secret_access_key,
        } => SharedCredentialsProvider::new(Credentials::new(
            access_key_id.clone(),
            secret_access_key.clone(),
            None,
            None,
            "kuadrant.io/aws secret",
        )),
        AwsSource::Ambient => SharedCredentialsProvider::new(
            DefaultCredentialsChain::builder()
                .region(region.clone())
                .configure(
                    ProviderConfig::default()
                        .with_http_client(http_client())
                        .with_region(Some(region.clone())),
                )
                .build()
                .await,
        ),
    };
    let Some(role) = &identity.assume_role else {
        return source;
    };
    let mut sts = aws_config::defaults(BehaviorVersion::latest())
        .http_client(http_client())
        .region(region.clone())
        .credentials_provider(source.clone());
    if let Some(endpoint) = &identity.sts_endpoint {
        sts = sts.endpoint_url(endpoint);
    }
    let sts = sts.load().await;
    let mut builder = AssumeRoleProvider::builder(role.role_arn.clone())
        .session_name(role.session_name.clone())
        .region(region)
        .configure(&sts);
    if let Some(external_id) = &role.external_id {
        builder = builder.external_id(external_id.clone());
    }
    SharedCredentialsProvider::new(builder.build_from_provider(source).await)
}

/// Whether `arn` is an IAM role's ARN (`arn:<partition>:iam::<12 digits>:role/<path and
/// name>`): what AssumeRole accepts, checked before any call.
pub fn is_role_arn(arn: &str) -> bool {
    let mut parts = arn.splitn(6, ':');
    let (Some("arn"), Some(partition), Some("iam"), Some(""), Some(account), Some(resource)) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return false;
    };
    partition.starts_with("aws")
        && account.len() == 12
        && account.bytes().all(|b| b.is_ascii_digit())
        && resource
            .strip_prefix("role/")
            .is_some_and(|name| !name.is_empty() && name.len() <= 512)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_arns_are_iam_roles_with_an_account() {
        for good in [
            "arn:aws:iam::123456789012:role/meridian-dns",
            "arn:aws-us-gov:iam::123456789012:role/path/to/dns",
            "arn:aws-cn:iam::123456789012:role/x",
        ] {
            assert!(is_role_arn(good), "{good}");
        }
        for bad in [
            "",
            "arn:aws:iam::123456789012:user/alice",
            "arn:aws:iam::12345:role/x",
            "arn:aws:sts::123456789012:role/x",
            "arn:aws:iam:us-east-1:123456789012:role/x",
            "arn:aws:iam::123456789012:role/",
            "arn:azure:iam::123456789012:role/x",
        ] {
            assert!(!is_role_arn(bad), "{bad}");
        }
    }
}
