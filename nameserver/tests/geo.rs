//! Client locations from a MaxMind-format database written by the test kit.

use meridian_nameserver::GeoDb;
use meridian_testkit::geo_db::write_database;

#[test]
fn a_written_database_locates_its_networks_only() {
    let bytes = write_database(&[
        ("192.0.2.0/24".parse().unwrap(), "IE", "EU"),
        ("198.51.100.0/24".parse().unwrap(), "US", "NA"),
    ]);
    let db = GeoDb::from_bytes(bytes).unwrap();
    let ie = db.locate("192.0.2.77".parse().unwrap()).unwrap();
    assert_eq!(
        (ie.country.as_deref(), ie.continent.as_deref()),
        (Some("IE"), Some("GEO-EU"))
    );
    assert_eq!(
        db.locate("198.51.100.1".parse().unwrap())
            .unwrap()
            .country
            .as_deref(),
        Some("US")
    );
    assert_eq!(db.locate("203.0.113.1".parse().unwrap()), None);
}
