//! Per-control-plane certificates: a CA, the apiserver's serving certificate for loopback, an
//! admin client certificate in `system:masters`, and the service-account signing key.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};

use crate::Error;

/// PEM-encoded material for one control plane.
#[derive(Debug)]
pub(crate) struct ControlPlanePki {
    pub ca_cert: String,
    pub serving_cert: String,
    pub serving_key: String,
    pub admin_cert: String,
    pub admin_key: String,
    pub service_account_key: String,
    pub service_account_public_key: String,
}

impl ControlPlanePki {
    pub fn generate(cluster_name: &str) -> Result<Self, Error> {
        let mut ca_params = CertificateParams::default();
        ca_params.distinguished_name = common_name(&format!("meridian-testbed-ca-{cluster_name}"));
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;

        let mut serving_params =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])?;
        serving_params.distinguished_name = common_name("kube-apiserver");
        serving_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let serving_key = KeyPair::generate()?;
        let serving_cert = serving_params.signed_by(&serving_key, &ca)?;

        let mut admin_params = CertificateParams::default();
        admin_params.distinguished_name = common_name("meridian-testbed-admin");
        admin_params
            .distinguished_name
            .push(DnType::OrganizationName, "system:masters");
        admin_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let admin_key = KeyPair::generate()?;
        let admin_cert = admin_params.signed_by(&admin_key, &ca)?;

        // The apiserver reads verification keys only from public-key (or PKCS#1/SEC1) PEM, so
        // the signing key's public half gets a file of its own.
        let service_account_key = KeyPair::generate()?;
        Ok(ControlPlanePki {
            ca_cert: ca.pem(),
            serving_cert: serving_cert.pem(),
            serving_key: serving_key.serialize_pem(),
            admin_cert: admin_cert.pem(),
            admin_key: admin_key.serialize_pem(),
            service_account_key: service_account_key.serialize_pem(),
            service_account_public_key: service_account_key.public_key_pem(),
        })
    }
}

fn common_name(name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    dn
}
