//! Per-control-plane certificates: a CA, the apiserver's serving certificate for loopback, an
//! admin client certificate in `system:masters`, and the service-account signing key.

use std::net::Ipv4Addr;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};

use crate::Error;

/// PEM-encoded material for one control plane.
#[derive(Debug)]
pub(crate) struct ControlPlanePki {
    pub ca_cert: String,
    /// The CA's key: kube-controller-manager signs approved client CSRs with it (OCM's
    /// registration agents join with one).
    pub ca_key: String,
    pub serving_cert: String,
    pub serving_key: String,
    pub admin_cert: String,
    pub admin_key: String,
    pub service_account_key: String,
    pub service_account_public_key: String,
    /// With a node: the kubelet's certificate, serving on the node address and identifying it
    /// to the API server as `system:node:<name>`.
    pub kubelet_cert: Option<String>,
    pub kubelet_key: Option<String>,
}

impl ControlPlanePki {
    /// `node_address`: the address the API server and the kubelet also serve on, when the
    /// control plane has a node.
    pub fn generate(cluster_name: &str, node_address: Option<Ipv4Addr>) -> Result<Self, Error> {
        let mut ca_params = CertificateParams::default();
        ca_params.distinguished_name = common_name(&format!("meridian-testbed-ca-{cluster_name}"));
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = KeyPair::generate()?;
        let ca_key_pem = ca_key.serialize_pem();
        let ca = CertifiedIssuer::self_signed(ca_params, ca_key)?;

        let mut serving_names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        serving_names.extend(node_address.map(|address| address.to_string()));
        let mut serving_params = CertificateParams::new(serving_names)?;
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
        let kubelet = node_address
            .map(|address| -> Result<_, Error> {
                let mut params = CertificateParams::new(vec![address.to_string()])?;
                params.distinguished_name = common_name(&format!("system:node:{cluster_name}"));
                params
                    .distinguished_name
                    .push(DnType::OrganizationName, "system:nodes");
                params.extended_key_usages = vec![
                    ExtendedKeyUsagePurpose::ServerAuth,
                    ExtendedKeyUsagePurpose::ClientAuth,
                ];
                let key = KeyPair::generate()?;
                let cert = params.signed_by(&key, &ca)?;
                Ok((cert.pem(), key.serialize_pem()))
            })
            .transpose()?;
        let (kubelet_cert, kubelet_key) = kubelet.unzip();
        Ok(ControlPlanePki {
            ca_cert: ca.pem(),
            ca_key: ca_key_pem,
            serving_cert: serving_cert.pem(),
            serving_key: serving_key.serialize_pem(),
            admin_cert: admin_cert.pem(),
            admin_key: admin_key.serialize_pem(),
            service_account_key: service_account_key.serialize_pem(),
            service_account_public_key: service_account_key.public_key_pem(),
            kubelet_cert,
            kubelet_key,
        })
    }
}

fn common_name(name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    dn
}
