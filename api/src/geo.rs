//! Geo codes a DNSPolicy and ManagedCluster labels may use: ISO-3166-1 alpha-2 country codes,
//! and continents written `GEO-XX` (the spelling Route53 uses for its continent codes).

/// Officially assigned ISO-3166-1 alpha-2 codes.
pub const COUNTRY_CODES: [&str; 249] = [
    "AD", "AE", "AF", "AG", "AI", "AL", "AM", "AO", "AQ", "AR", "AS", "AT", "AU", "AW", "AX", "AZ",
    "BA", "BB", "BD", "BE", "BF", "BG", "BH", "BI", "BJ", "BL", "BM", "BN", "BO", "BQ", "BR", "BS",
    "BT", "BV", "BW", "BY", "BZ", "CA", "CC", "CD", "CF", "CG", "CH", "CI", "CK", "CL", "CM", "CN",
    "CO", "CR", "CU", "CV", "CW", "CX", "CY", "CZ", "DE", "DJ", "DK", "DM", "DO", "DZ", "EC", "EE",
    "EG", "EH", "ER", "ES", "ET", "FI", "FJ", "FK", "FM", "FO", "FR", "GA", "GB", "GD", "GE", "GF",
    "GG", "GH", "GI", "GL", "GM", "GN", "GP", "GQ", "GR", "GS", "GT", "GU", "GW", "GY", "HK", "HM",
    "HN", "HR", "HT", "HU", "ID", "IE", "IL", "IM", "IN", "IO", "IQ", "IR", "IS", "IT", "JE", "JM",
    "JO", "JP", "KE", "KG", "KH", "KI", "KM", "KN", "KP", "KR", "KW", "KY", "KZ", "LA", "LB", "LC",
    "LI", "LK", "LR", "LS", "LT", "LU", "LV", "LY", "MA", "MC", "MD", "ME", "MF", "MG", "MH", "MK",
    "ML", "MM", "MN", "MO", "MP", "MQ", "MR", "MS", "MT", "MU", "MV", "MW", "MX", "MY", "MZ", "NA",
    "NC", "NE", "NF", "NG", "NI", "NL", "NO", "NP", "NR", "NU", "NZ", "OM", "PA", "PE", "PF", "PG",
    "PH", "PK", "PL", "PM", "PN", "PR", "PS", "PT", "PW", "PY", "QA", "RE", "RO", "RS", "RU", "RW",
    "SA", "SB", "SC", "SD", "SE", "SG", "SH", "SI", "SJ", "SK", "SL", "SM", "SN", "SO", "SR", "SS",
    "ST", "SV", "SX", "SY", "SZ", "TC", "TD", "TF", "TG", "TH", "TJ", "TK", "TL", "TM", "TN", "TO",
    "TR", "TT", "TV", "TW", "TZ", "UA", "UG", "UM", "US", "UY", "UZ", "VA", "VC", "VE", "VG", "VI",
    "VN", "VU", "WF", "WS", "YE", "YT", "ZA", "ZM", "ZW",
];

/// Continent codes: Africa, Antarctica, Asia, Europe, North America, Oceania, South America.
pub const CONTINENT_CODES: [&str; 7] = [
    "GEO-AF", "GEO-AN", "GEO-AS", "GEO-EU", "GEO-NA", "GEO-OC", "GEO-SA",
];

/// Whether `code` is a geo code Meridian accepts.
pub fn is_valid_geo_code(code: &str) -> bool {
    COUNTRY_CODES.contains(&code) || CONTINENT_CODES.contains(&code)
}

/// The CEL expression the CRD schema uses for a geo-code string; the same set as
/// [`is_valid_geo_code`], so what the API server admits the engine understands.
pub fn geo_code_cel() -> String {
    let quoted = |codes: &[&str]| {
        codes
            .iter()
            .map(|code| format!("'{code}'"))
            .collect::<Vec<_>>()
            .join(",")
    };
    format!(
        "self in [{}] || self in [{}]",
        quoted(&COUNTRY_CODES),
        quoted(&CONTINENT_CODES)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn country_codes_are_unique_sorted_pairs_of_capitals() {
        let mut sorted = COUNTRY_CODES.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(
            sorted,
            COUNTRY_CODES.to_vec(),
            "sorted and without duplicates"
        );
        assert!(
            COUNTRY_CODES
                .iter()
                .all(|c| c.len() == 2 && c.bytes().all(|b| b.is_ascii_uppercase()))
        );
    }

    #[test]
    fn accepts_countries_and_continents_only() {
        for code in ["IE", "US", "GB", "GEO-EU", "GEO-NA"] {
            assert!(is_valid_geo_code(code), "{code}");
        }
        for code in [
            "ie", "UK", "EU", "GEO-XX", "GEO-eu", "", "IRL", "*", "default",
        ] {
            assert!(!is_valid_geo_code(code), "{code}");
        }
    }

    #[test]
    fn cel_lists_every_code() {
        let cel = geo_code_cel();
        assert!(
            COUNTRY_CODES
                .iter()
                .chain(&CONTINENT_CODES)
                .all(|code| cel.contains(&format!("'{code}'")))
        );
    }
}
