//! TSIG (RFC 8945) on the server side: a signed request is checked against the server's keys,
//! and every message of its response is signed, each one chained to the MAC before it (a zone
//! transfer spans many messages).

use hickory_proto::op::Message;
use hickory_proto::rr::rdata::tsig::{TSIG, TsigError, make_tsig_record};
use hickory_proto::rr::{TSigResponseContext, TSigner};
use hickory_proto::serialize::binary::BinEncoder;

use meridian_dns::wire::TsigKey;

/// Seconds a signature's time may differ from the server's clock (RFC 8945 recommends 300).
pub(crate) const FUDGE: u16 = 300;

/// What a request's TSIG record says about it.
pub(crate) enum Verdict {
    /// No TSIG record.
    Unsigned,
    /// Signed with a known key: answer, and sign every response message with `signer`.
    Signed(ResponseSigner),
    /// Signed, but not acceptably: answer NOTAUTH with this TSIG error, and nothing else.
    Rejected(Rejection),
}

pub(crate) struct Rejection {
    context: TSigResponseContext,
}

impl Rejection {
    /// The TSIG record of the NOTAUTH response (unsigned for BADKEY and BADSIG, as RFC 8945
    /// requires; signed for BADTIME).
    pub(crate) fn seal(self, response: &mut Message) -> Option<Vec<u8>> {
        let unsigned = response.to_vec().ok()?;
        let record = self.context.sign(&unsigned).ok()?;
        response.set_signature(record);
        response.to_vec().ok()
    }
}

/// Checks the TSIG record of `request` (parsed from `bytes`) at unix time `now`.
pub(crate) fn verify(request: &Message, bytes: &[u8], keys: &[TsigKey], now: u64) -> Verdict {
    let Some(record) = request.signature() else {
        return Verdict::Unsigned;
    };
    let id = request.metadata.id;
    let Some(signer) = keys
        .iter()
        .map(|key| key.signer(FUDGE))
        .find(|signer| signer.signer_name() == &record.name)
    else {
        return Verdict::Rejected(Rejection {
            context: TSigResponseContext::unknown_key(id, now, record.name.clone()),
        });
    };
    match signer.verify_message_byte(bytes, None, true) {
        Err(_) => Verdict::Rejected(Rejection {
            context: TSigResponseContext::bad_signature(id, now, signer.clone()),
        }),
        Ok((mac, _, window)) if !window.contains(&now) => Verdict::Rejected(Rejection {
            context: TSigResponseContext::new(
                id,
                now,
                signer.clone(),
                mac,
                Some(TsigError::BadTime),
            ),
        }),
        Ok((mac, _, _)) => Verdict::Signed(ResponseSigner {
            signer: signer.clone(),
            previous_mac: mac,
            request_id: record.data.oid,
            time: now,
            first: true,
        }),
    }
}

/// Signs the messages of one response in order.
pub(crate) struct ResponseSigner {
    signer: TSigner,
    /// The request's MAC for the first message, then the MAC of the message before.
    previous_mac: Vec<u8>,
    request_id: u16,
    time: u64,
    first: bool,
}

impl ResponseSigner {
    /// Bytes a signature adds to a message, at most (key and algorithm names, a SHA-512 MAC).
    pub(crate) const OVERHEAD: usize = 2 * 255 + 10 + 16 + 64;

    /// `message` signed, as bytes.
    pub(crate) fn sign(&mut self, message: &mut Message) -> Option<Vec<u8>> {
        let unsigned = message.to_vec().ok()?;
        let mut tsig = TSIG::new(
            self.signer.algorithm().clone(),
            self.time,
            self.signer.fudge(),
            Vec::new(),
            self.request_id,
            None,
            Vec::new(),
        );
        // The first message covers every TSIG variable; later ones of the same response only
        // the timers (RFC 8945 section 5.3.1).
        let to_be_signed = if self.first {
            self.signer
                .encode_response_tbs(&self.previous_mac, &unsigned, &tsig)
                .ok()?
        } else {
            let mut buffer = Vec::with_capacity(unsigned.len() + self.previous_mac.len() + 10);
            let mut encoder = BinEncoder::new(&mut buffer);
            encoder
                .emit_u16(u16::try_from(self.previous_mac.len()).ok()?)
                .ok()?;
            encoder.emit_vec(&self.previous_mac).ok()?;
            encoder.emit_vec(&unsigned).ok()?;
            encoder.emit_u16((self.time >> 32) as u16).ok()?;
            encoder.emit_u32(self.time as u32).ok()?;
            encoder.emit_u16(self.signer.fudge()).ok()?;
            buffer
        };
        let mac = self.signer.sign(&to_be_signed).ok()?;
        tsig = tsig.set_mac(mac.clone());
        message.set_signature(Box::new(make_tsig_record(
            self.signer.signer_name().clone(),
            tsig,
        )));
        self.previous_mac = mac;
        self.first = false;
        message.to_vec().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::{MessageType, OpCode, Query};
    use hickory_proto::rr::{Name, RecordType};

    fn key(name: &str, secret: &str) -> TsigKey {
        TsigKey::new(name, "hmac-sha256", secret).unwrap()
    }

    fn signed_request(key: &TsigKey, time: u64) -> Vec<u8> {
        let mut request = Message::new(4242, MessageType::Query, OpCode::Query);
        request.add_query(Query::query(
            Name::from_ascii("example.com.").unwrap(),
            RecordType::AXFR,
        ));
        request.finalize(&key.signer(FUDGE), time).unwrap();
        request.to_vec().unwrap()
    }

    fn verdict(bytes: &[u8], keys: &[TsigKey], now: u64) -> &'static str {
        match verify(&Message::from_vec(bytes).unwrap(), bytes, keys, now) {
            Verdict::Unsigned => "unsigned",
            Verdict::Signed(_) => "signed",
            Verdict::Rejected(_) => "rejected",
        }
    }

    #[test]
    fn requests_are_accepted_only_with_a_known_key_a_right_mac_and_a_close_clock() {
        let good = key("xfr", "c2VjcmV0LXNlY3JldA==");
        let keys = std::slice::from_ref(&good);
        let now = 1_800_000_000;
        assert_eq!(verdict(&signed_request(&good, now), keys, now), "signed");
        assert_eq!(
            verdict(&signed_request(&good, now - 299), keys, now),
            "signed"
        );
        assert_eq!(
            verdict(&signed_request(&good, now - 301), keys, now),
            "rejected",
            "BADTIME"
        );
        let wrong_secret = key("xfr", "b3RoZXItc2VjcmV0");
        assert_eq!(
            verdict(&signed_request(&wrong_secret, now), keys, now),
            "rejected",
            "BADSIG"
        );
        let unknown = key("other", "c2VjcmV0LXNlY3JldA==");
        assert_eq!(
            verdict(&signed_request(&unknown, now), keys, now),
            "rejected",
            "BADKEY"
        );
        let mut plain = Message::new(1, MessageType::Query, OpCode::Query);
        plain.add_query(Query::query(
            Name::from_ascii("example.com.").unwrap(),
            RecordType::SOA,
        ));
        assert_eq!(verdict(&plain.to_vec().unwrap(), keys, now), "unsigned");
    }

    #[test]
    fn a_chain_of_signed_responses_verifies_as_clients_check_it() {
        let good = key("xfr", "c2VjcmV0LXNlY3JldA==");
        let keys = std::slice::from_ref(&good);
        let now = 1_800_000_000;
        let bytes = signed_request(&good, now);
        let request = Message::from_vec(&bytes).unwrap();
        let Verdict::Signed(mut signer) = verify(&request, &bytes, keys, now) else {
            panic!("a good request verifies");
        };
        // The client side: hickory's verifier, chained from the request's MAC.
        let client = good.signer(FUDGE);
        let mut previous = request.signature().unwrap().data.mac.clone();
        for index in 0..3 {
            let mut response = Message::new(4242, MessageType::Response, OpCode::Query);
            response.add_query(request.queries[0].clone());
            let signed = signer.sign(&mut response).unwrap();
            let (mac, _, _) = client
                .verify_message_byte(&signed, Some(&previous), index == 0)
                .unwrap_or_else(|e| panic!("message {index} verifies: {e}"));
            previous = mac;
        }
    }
}
