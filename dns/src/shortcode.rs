//! Short, stable names derived from long identifiers, identical to the ones Kuadrant's tools
//! produce so a zone can be shared with them and migrated between them.

use sha2::{Digest, Sha224};

const ALPHABET: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";

/// SHA-224 of `input`, read as a big-endian unsigned integer and written in base 36, with one
/// extra leading `0` per leading zero byte of the digest, cut to the first `length` characters.
pub fn shortcode(input: &str, length: usize) -> String {
    let digest = Sha224::digest(input.as_bytes());
    let leading_zero_bytes = digest.iter().take_while(|byte| **byte == 0).count();

    // Repeated division of the big-endian digest by 36; the remainders are the digits.
    let mut number: Vec<u8> = digest[leading_zero_bytes..].to_vec();
    let mut digits = Vec::new();
    while !number.is_empty() {
        let mut remainder = 0u32;
        let mut quotient = Vec::with_capacity(number.len());
        for byte in &number {
            let accumulator = (remainder << 8) | u32::from(*byte);
            let digit = accumulator / 36;
            remainder = accumulator % 36;
            if !quotient.is_empty() || digit != 0 {
                quotient.push(digit as u8);
            }
        }
        digits.push(ALPHABET[remainder as usize]);
        number = quotient;
    }
    let encoded = std::iter::repeat_n(b'0', leading_zero_bytes).chain(digits.into_iter().rev());
    encoded.take(length).map(char::from).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_design_examples() {
        assert_eq!(shortcode("test-cluster-1", 6), "20qri0");
        assert_eq!(shortcode("TestName-TestNamespace", 6), "a8xcra");
        assert_eq!(shortcode("2vl2ac4b", 8), "2kl5wt14");
    }

    #[test]
    fn is_a_prefix_of_the_full_encoding() {
        let full = shortcode("some-owner", 64);
        assert!(full.len() > 40, "224 bits take about 43 base-36 digits");
        assert_eq!(shortcode("some-owner", 8), full[..8]);
        assert!(full.bytes().all(|b| ALPHABET.contains(&b)));
    }
}
