//! NOTIFY (RFC 1996): every zone change is announced to the configured secondaries, which then
//! ask for the change by IXFR. Changes that come quickly one after another are announced once,
//! with the newest serial; a secondary that does not acknowledge is asked again a few times.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{RData, Record, RecordType as WireType};
use tokio::net::UdpSocket;
use tokio::sync::Notify;
use tokio::task::JoinSet;

use crate::tsig::FUDGE;
use crate::zone::Catalog;
use crate::zone::apex::soa as zone_soa;
use meridian_dns::wire::TsigKey;

/// Sends of one NOTIFY before the secondary is given up on until the next change.
const ATTEMPTS: u32 = 5;
/// How long the first send waits for its acknowledgement; each retry waits twice as long.
const FIRST_WAIT: Duration = Duration::from_millis(500);

/// Announces the changes of `catalog` to `secondaries` each time `changed` is notified, signed
/// with `key` when there is one. Runs until it is aborted.
pub(crate) async fn announce_changes(
    catalog: Arc<ArcSwap<Catalog>>,
    changed: Arc<Notify>,
    secondaries: Vec<SocketAddr>,
    key: Option<TsigKey>,
) {
    let mut announced: HashMap<String, u32> = HashMap::new();
    let mut sends = JoinSet::new();
    loop {
        tokio::select! {
            () = changed.notified() => {}
            Some(_) = sends.join_next(), if !sends.is_empty() => continue,
        }
        let catalog = catalog.load();
        for zone in catalog.zones() {
            if announced.get(zone.apex()) == Some(&zone.serial) {
                continue;
            }
            announced.insert(zone.apex().to_string(), zone.serial);
            for secondary in &secondaries {
                sends.spawn(notify(*secondary, zone_soa(zone), key.clone()));
            }
        }
    }
}

/// One NOTIFY to one secondary, repeated until it is acknowledged or the attempts run out.
async fn notify(secondary: SocketAddr, soa: Record, key: Option<TsigKey>) {
    let local: SocketAddr = if secondary.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let Ok(socket) = UdpSocket::bind(local).await else {
        return;
    };
    let id: u16 = rand::random();
    let mut message = Message::new(id, MessageType::Query, OpCode::Notify);
    message.metadata.authoritative = true;
    message.add_query(Query::query(soa.name.clone(), WireType::SOA));
    let (apex, serial) = match &soa.data {
        RData::SOA(data) => (soa.name.to_string(), data.serial),
        _ => return,
    };
    // RFC 1996 section 3.7: the new SOA may come along, saving the secondary a query when it
    // already has that serial.
    message.add_answer(soa);
    if let Some(key) = &key {
        let now = crate::clock::unix_now();
        if message.finalize(&key.signer(FUDGE), now).is_err() {
            return;
        }
    }
    let Ok(bytes) = message.to_vec() else {
        return;
    };
    let mut wait = FIRST_WAIT;
    let mut buffer = [0u8; 1232];
    for _ in 0..ATTEMPTS {
        if socket.send_to(&bytes, secondary).await.is_err() {
            return;
        }
        let acknowledged = tokio::time::timeout(wait, async {
            loop {
                let Ok((length, from)) = socket.recv_from(&mut buffer).await else {
                    return false;
                };
                let Ok(reply) = Message::from_vec(&buffer[..length]) else {
                    continue;
                };
                if from == secondary
                    && reply.metadata.id == id
                    && reply.metadata.message_type == MessageType::Response
                {
                    return true;
                }
            }
        })
        .await;
        if acknowledged == Ok(true) {
            tracing::debug!(%secondary, zone = %apex, serial, "secondary notified");
            return;
        }
        wait *= 2;
    }
    tracing::warn!(%secondary, zone = %apex, serial, "secondary did not acknowledge NOTIFY");
}
