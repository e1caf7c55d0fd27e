//! Any packet → the nameserver's responses: never a panic, and every response parses.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use meridian_dns::model::{Endpoint, RecordType};
use meridian_nameserver::{Catalog, GeoDb, QueryContext, Transport, Zone, ZoneConfig, respond};
use rand::SeedableRng;

fn catalog() -> &'static (Catalog, GeoDb) {
    static CATALOG: OnceLock<(Catalog, GeoDb)> = OnceLock::new();
    CATALOG.get_or_init(|| {
        let a = |name: &str, ip: &str| Endpoint::new(name, RecordType::A, [ip.to_string()], 60);
        let cname = |name: &str, target: &str| Endpoint::new(name, RecordType::Cname, [target.to_string()], 60);
        let records = vec![
            cname("api.example.com", "klb.api.example.com"),
            cname("klb.api.example.com", "ie.klb.api.example.com").with_set_identifier("IE").with_property("geo-code", "IE"),
            cname("klb.api.example.com", "ie.klb.api.example.com").with_set_identifier("default").with_property("geo-code", "*"),
            cname("ie.klb.api.example.com", "c1.klb.api.example.com").with_set_identifier("c1").with_property("weight", "3"),
            cname("ie.klb.api.example.com", "lb.example.net").with_set_identifier("lb").with_property("weight", "0"),
            a("c1.klb.api.example.com", "192.0.2.1"),
            cname("*.apps.example.com", "api.example.com"),
            cname("loop1.example.com", "loop2.example.com"),
            cname("loop2.example.com", "loop1.example.com"),
            Endpoint::new("big.example.com", RecordType::Txt, (0..40).map(|i| format!("{i:03}{}", "x".repeat(200))), 60),
        ];
        let zone = Zone::new(ZoneConfig::new("example.com"), 1, records);
        let geo = GeoDb::from_bytes(meridian_testkit::geo_db::write_database(&[("192.0.2.0/24".parse().unwrap(), "IE", "EU")]))
            .expect("test database");
        (Catalog::default().with_zone(zone), geo)
    })
}

fuzz_target!(|data: &[u8]| {
    let (catalog, geo) = catalog();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(data.len() as u64);
    let allowed = ["127.0.0.0/8".parse().unwrap()];
    // Signed requests and cookies take their own paths: a key and a cookie secret are set.
    let keys = [meridian_nameserver::TsigKey::new("fuzz", "hmac-sha256", "ZnV6eg==").unwrap()];
    for transport in [Transport::Udp, Transport::Tcp] {
        let context = QueryContext { source: [127, 0, 0, 1].into(), transport, geo: Some(geo), transfer_allowed: &allowed, stats: None, tsig_keys: &keys, cookie_secret: Some(b"fuzz cookie secret"), now: 1_800_000_000 };
        for response in respond(catalog, data, &context, &mut rng) {
            hickory_proto::op::Message::from_vec(&response).expect("responses parse");
            if transport == Transport::Udp {
                assert!(response.len() <= 4096, "a UDP response fits the largest buffer");
            }
        }
    }
});
