//! The nameserver on UDP and TCP, answering from a catalog that can be swapped while it runs.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType};

use arc_swap::ArcSwap;
use ipnet::IpNet;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinSet;

use crate::answer::{respond, respond_into};
use crate::clock::unix_now;
use crate::geo::GeoDb;
use crate::query::{QueryContext, SERVER_UDP_PAYLOAD, Transport};
use crate::rate_limit::{RateLimit, RateLimiter, Verdict};
use crate::stats::{Stats, TcpClosed};
use crate::zone::{Catalog, Zone, ZoneConfig};
use meridian_dns::model::Endpoint;
use meridian_dns::wire::TsigKey;

/// How long a TCP connection may sit idle, take to send one message, or take to accept one
/// answer, before it is closed: a client that pipelines questions and never reads the answers
/// holds a connection this long at most.
pub const DEFAULT_TCP_IDLE: Duration = Duration::from_secs(10);

/// TCP connections open at once by default (BIND's `tcp-clients` default): beyond it a new
/// connection is closed at once, so slow or idle clients cannot exhaust the server.
pub const DEFAULT_TCP_CONNECTIONS: usize = 150;

/// TCP connections one client address may hold at once by default: a tenth of the server's,
/// so no one client (or the few addresses of one attacker) can take them all, while a busy
/// resolver keeps several.
pub const DEFAULT_TCP_PER_CLIENT: usize = 15;

/// The longest `accept()` waits after an error (a full file table) before trying again.
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// How the server runs.
#[derive(Debug)]
pub struct ServerConfig {
    pub geo: Option<GeoDb>,
    /// Networks allowed to transfer zones without a key.
    pub transfer_allowed: Vec<IpNet>,
    /// TSIG keys: a request signed with one is answered signed, and may transfer zones.
    pub tsig_keys: Vec<TsigKey>,
    /// Secondaries told of every zone change by NOTIFY (signed with the first key, if any).
    pub notify: Vec<SocketAddr>,
    /// DNS cookies (RFC 7873) for clients that send one.
    pub cookies: bool,
    /// TCP connections open at once; more are closed as they arrive.
    pub max_tcp_connections: usize,
    /// TCP connections open at once from one client address; more are closed as they arrive.
    pub max_tcp_per_client: usize,
    /// How long a TCP connection may be idle, or stalled reading or writing one message.
    pub tcp_idle: Duration,
    /// Response rate limiting over UDP per client prefix; none answers everything.
    pub rate_limit: Option<RateLimit>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            geo: None,
            transfer_allowed: Vec::new(),
            tsig_keys: Vec::new(),
            notify: Vec::new(),
            cookies: true,
            max_tcp_connections: DEFAULT_TCP_CONNECTIONS,
            max_tcp_per_client: DEFAULT_TCP_PER_CLIENT,
            tcp_idle: DEFAULT_TCP_IDLE,
            rate_limit: None,
        }
    }
}

/// A running nameserver. Dropping it stops its tasks and, within [`UDP_WAKE`], its UDP
/// threads.
#[derive(Debug)]
pub struct NameServer {
    catalog: Arc<ArcSwap<Catalog>>,
    /// Held while a zone is published: the catalog has one writer at a time.
    publishing: std::sync::Mutex<()>,
    stats: Arc<Stats>,
    /// Zones keep a transfer history (a journal for IXFR) only where transfers are allowed.
    keeps_history: bool,
    /// Wakes the NOTIFY task after a change.
    changed: Arc<Notify>,
    local_addr: SocketAddr,
    tasks: JoinSet<()>,
    /// UDP answers on threads of their own, each blocking in `recv_from` on its own socket
    /// (SO_REUSEPORT): no async runtime's readiness polling and task wake-ups per query, which
    /// were most of the cost left once answering itself was cheap (`make bench-dns`).
    udp_threads: Vec<std::thread::JoinHandle<()>>,
    stopping: Arc<AtomicBool>,
}

/// How often a UDP thread idle in `recv_from` looks whether the server is stopping.
const UDP_WAKE: Duration = Duration::from_millis(200);

impl Drop for NameServer {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::Relaxed);
    }
}

/// What every task of one server reads.
#[derive(Debug)]
struct Shared {
    catalog: Arc<ArcSwap<Catalog>>,
    config: ServerConfig,
    stats: Arc<Stats>,
    limiter: Option<RateLimiter>,
    cookie_secret: Option<[u8; 32]>,
}

/// The tally TCP answers count on; UDP thread `i` counts on tally `i + 1`.
const TCP_TALLY: usize = 0;

impl Shared {
    /// What answering a query from `source` needs, counted on tally `tally`, at Unix time `now`.
    fn context(
        &self,
        source: IpAddr,
        transport: Transport,
        tally: usize,
        now: u64,
    ) -> QueryContext<'_> {
        QueryContext {
            source,
            transport,
            geo: self.config.geo.as_ref(),
            transfer_allowed: &self.config.transfer_allowed,
            stats: Some(self.stats.tally(tally)),
            tsig_keys: &self.config.tsig_keys,
            cookie_secret: self.cookie_secret.as_ref().map(|s| s.as_slice()),
            now,
        }
    }
}

impl NameServer {
    /// Binds UDP and TCP on `listen` (port 0 picks one free for both) and starts answering.
    pub async fn start(listen: SocketAddr, config: ServerConfig) -> std::io::Result<Self> {
        // One UDP socket and thread per core keep every core busy under load.
        let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
        let (udp, tcp) = bind_sockets(listen, workers).await?;
        let local_addr = udp[0].local_addr()?;
        let catalog = Arc::new(ArcSwap::from_pointee(Catalog::default()));
        // A tally for TCP and one for each UDP thread.
        let stats = Arc::new(Stats::with_tallies(workers + 1));
        let keeps_history = !config.transfer_allowed.is_empty() || !config.tsig_keys.is_empty();
        let changed = Arc::new(Notify::new());
        let mut tasks = JoinSet::new();
        if !config.notify.is_empty() {
            tasks.spawn(crate::notify::announce_changes(
                catalog.clone(),
                changed.clone(),
                config.notify.clone(),
                config.tsig_keys.first().cloned(),
            ));
        }
        let shared = Arc::new(Shared {
            catalog: catalog.clone(),
            limiter: config.rate_limit.map(RateLimiter::new),
            cookie_secret: config.cookies.then(rand::random),
            config,
            stats: stats.clone(),
        });
        let stopping = Arc::new(AtomicBool::new(false));
        let mut udp_threads = Vec::with_capacity(workers);
        for (index, socket) in udp.into_iter().enumerate() {
            let (shared, stopping) = (shared.clone(), stopping.clone());
            udp_threads.push(
                std::thread::Builder::new()
                    .name(format!("dns-udp-{index}"))
                    .spawn(move || serve_udp(&socket, &shared, index + 1, &stopping))?,
            );
        }
        tasks.spawn(serve_tcp(tcp, shared));
        tasks.spawn(refresh_signatures(catalog.clone()));
        Ok(NameServer {
            catalog,
            publishing: Default::default(),
            stats,
            keeps_history,
            changed,
            local_addr,
            tasks,
            udp_threads,
            stopping,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// What it has answered so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Replaces one zone's records atomically and tells the secondaries. The SOA serial grows
    /// on every change and is at least the Unix time, so that it also grows across restarts
    /// and stays close between replicas (what BIND's `serial-update-method unixtime` does).
    pub fn publish(&self, config: ZoneConfig, endpoints: impl IntoIterator<Item = Endpoint>) {
        let now = u32::try_from(unix_now()).unwrap_or(u32::MAX);
        self.publish_numbered(config, endpoints, |previous| {
            previous.map_or(now, |serial| next_serial(serial, now))
        });
    }

    /// As [`Self::publish`], under the serial `number` gives from the serial served until now
    /// (none for a new zone); returns it. The caller numbers when replicas must agree (see
    /// `meridian_controllers::zones::zone_provider`). The same serial again says the records did
    /// not change: secondaries are not told, and the transfer journal stays as it was.
    pub fn publish_numbered(
        &self,
        config: ZoneConfig,
        endpoints: impl IntoIterator<Item = Endpoint>,
        number: impl FnOnce(Option<u32>) -> u32,
    ) -> u32 {
        // One publisher at a time, so the zone is built once from the version it replaces
        // (a compare-and-swap loop would build, and copy the records, again on every retry).
        let _one_publisher = self.publishing.lock().expect("no panics while publishing");
        let current = self.catalog.load_full();
        let previous = current.zone(&config.apex).map(Arc::as_ref);
        let serial = number(previous.map(|zone| zone.serial));
        let mut zone = Zone::replacing(previous, config, serial, endpoints);
        if self.keeps_history {
            zone = match previous {
                Some(previous) if previous.serial == serial => {
                    zone.history = previous.history.clone();
                    zone
                }
                _ => zone.with_history(previous),
            };
        }
        self.catalog.store(Arc::new(current.with_zone(zone)));
        self.changed.notify_one();
        serial
    }

    /// Stops answering for the zone at `apex` (queries for it are then refused, and resolvers
    /// ask its other name servers).
    pub fn withdraw(&self, apex: &str) {
        let _one_publisher = self.publishing.lock().expect("no panics while publishing");
        let current = self.catalog.load_full();
        if current.zone(apex).is_some() {
            self.catalog.store(Arc::new(current.without(apex)));
        }
    }

    /// The current serial of the zone at `apex`.
    pub fn serial(&self, apex: &str) -> Option<u32> {
        self.catalog.load().zone(apex).map(|zone| zone.serial)
    }

    /// Stops answering.
    pub async fn shutdown(mut self) {
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
        self.stopping.store(true, Ordering::Relaxed);
        let threads = std::mem::take(&mut self.udp_threads);
        let _ = tokio::task::spawn_blocking(move || {
            for thread in threads {
                let _ = thread.join();
            }
        })
        .await;
    }
}

/// The serial after `serial` at Unix time `now`: the newer of the two, so serials grow on
/// every change and stay close to the time.
pub fn next_serial(serial: u32, now: u32) -> u32 {
    let next = serial.wrapping_add(1).max(1);
    if crate::history::serial_newer(now, next) {
        now
    } else {
        next
    }
}

/// How often signed zones are looked at for signatures due to be made again.
const SIGNATURE_LOOK: Duration = Duration::from_secs(600);

/// Keeps the signatures of signed zones fresh: a zone with signatures due is built again from
/// its own records (same serial, same history; [`Zone::replacing`] signs again what is due).
/// Until then the general path signs per query, so an answer is never left with an expired
/// signature; this only restores the prepared ones.
async fn refresh_signatures(catalog: Arc<ArcSwap<Catalog>>) {
    let mut interval = tokio::time::interval(SIGNATURE_LOOK);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let now = unix_now();
        let due = |zone: &Zone| zone.signatures_due().is_some_and(|due| due <= now);
        if !catalog.load().zones().any(&due) {
            continue;
        }
        catalog.rcu(|current| {
            let mut next = Catalog::clone(current);
            for zone in current.zones() {
                if due(zone) {
                    next = next.with_zone(zone.signed_again());
                }
            }
            next
        });
    }
}

/// Binds `count` UDP sockets to one address with SO_REUSEPORT (the kernel spreads clients
/// over them, so the threads do not contend for one socket's queue) and a TCP listener on the
/// same port. Port 0 picks a port free for both.
async fn bind_sockets(
    listen: SocketAddr,
    count: usize,
) -> std::io::Result<(Vec<std::net::UdpSocket>, TcpListener)> {
    let udp_socket = |address: SocketAddr| -> std::io::Result<std::net::UdpSocket> {
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(address),
            socket2::Type::DGRAM,
            Some(socket2::Protocol::UDP),
        )?;
        socket.set_reuse_port(true)?;
        socket.bind(&address.into())?;
        socket.set_read_timeout(Some(UDP_WAKE))?;
        Ok(socket.into())
    };
    let mut last_error = None;
    for _ in 0..16 {
        let first = udp_socket(listen)?;
        let address = first.local_addr()?;
        match TcpListener::bind(address).await {
            Ok(tcp) => {
                let mut sockets = vec![first];
                for _ in 1..count {
                    sockets.push(udp_socket(address)?);
                }
                return Ok((sockets, tcp));
            }
            Err(error) if listen.port() == 0 => last_error = Some(error),
            Err(error) => return Err(error),
        }
    }
    Err(last_error.unwrap_or_else(|| std::io::Error::other("no free port")))
}

/// Datagrams taken from the socket, and answers sent, in one system call each.
const UDP_BATCH: usize = 32;

/// The largest request read over UDP; a longer one is cut and fails to parse.
const UDP_REQUEST_MAX: usize = 4096;

/// How long a UDP thread lets datagrams gather after a read that found several waiting but
/// not a full batch (see [`gathering_pause`]).
const UDP_GATHER: Duration = Duration::from_micros(150);

/// The pause before the next read, given how many datagrams the last one took. Several at once
/// means the socket is busy: waiting [`UDP_GATHER`] instead of blocking on the socket at once
/// lets the next read take more, so the thread is woken fewer times per query, its answers
/// leave in fuller `sendmmsg` batches, and a client sending meanwhile finds no thread asleep on
/// the socket to wake (a wake-up is charged to the sender's system call). One datagram is a
/// trickle: no pause, no added latency. A full batch means more is waiting: no pause either,
/// so the pause never caps what a thread can take.
fn gathering_pause(taken: usize) -> Option<Duration> {
    (taken > 1 && taken < UDP_BATCH).then_some(UDP_GATHER)
}

/// Answers UDP in batches: one `recvmmsg` takes every waiting datagram (up to [`UDP_BATCH`]),
/// returning as soon as one has come, and one `sendmmsg` sends all their answers. Under load
/// that is two system calls per batch instead of two per query, the cost gdnsd saves the same
/// way; at a trickle it is one datagram per batch, with no added wait. Under load the thread
/// also pauses between reads ([`gathering_pause`]), so batches grow. Answers are written
/// into buffers the thread keeps and counted on its own tally (`tally`), with the clocks read
/// once per batch: a fast-path answer allocates nothing, and its counters are on no other
/// thread's cache line (rate limiting, when on, still shares its table).
fn serve_udp(socket: &std::net::UdpSocket, shared: &Shared, tally: usize, stopping: &AtomicBool) {
    use nix::sys::socket::{MsgFlags, MultiHeaders, SockaddrStorage, recvmmsg, sendmmsg};
    use std::io::{IoSlice, IoSliceMut};
    use std::os::fd::AsRawFd;

    let fd = socket.as_raw_fd();
    let mut rng = SmallRng::from_rng(&mut rand::rng());
    let mut buffers = Box::new([[0u8; UDP_REQUEST_MAX]; UDP_BATCH]);
    let mut received_headers = MultiHeaders::<SockaddrStorage>::preallocate(UDP_BATCH, None);
    let mut sent_headers = MultiHeaders::<SockaddrStorage>::preallocate(UDP_BATCH, None);
    // Per datagram: its length and its sender.
    let mut received: [Option<(usize, SocketAddr)>; UDP_BATCH] = [None; UDP_BATCH];
    // The answers of one batch, in buffers kept from batch to batch.
    let mut answers: [Vec<u8>; UDP_BATCH] =
        std::array::from_fn(|_| Vec::with_capacity(usize::from(SERVER_UDP_PAYLOAD)));
    let mut recipients: [Option<SockaddrStorage>; UDP_BATCH] = [None; UDP_BATCH];
    let mut taken = 0;
    while !stopping.load(Ordering::Relaxed) {
        if let Some(pause) = gathering_pause(taken) {
            std::thread::sleep(pause);
        }
        taken = 0;
        received.fill(None);
        {
            let mut slices = buffers.each_mut().map(|buffer| [IoSliceMut::new(buffer)]);
            // Blocks until one datagram is there (or the socket's read timeout, so a stopping
            // server is noticed), then takes whatever else is waiting without blocking.
            let Ok(batch) = recvmmsg(
                fd,
                &mut received_headers,
                slices.iter_mut(),
                MsgFlags::MSG_WAITFORONE,
                None,
            ) else {
                continue; // the wake-up timeout, or an error that concerns one datagram
            };
            for (index, datagram) in batch.enumerate() {
                taken += 1;
                received[index] = datagram
                    .address
                    .as_ref()
                    .and_then(socket_address)
                    .map(|source| (datagram.bytes, source));
            }
        }
        let (now, arrived) = (unix_now(), Instant::now());
        let mut count = 0;
        for (index, datagram) in received.iter().enumerate() {
            let Some((length, source)) = *datagram else {
                continue;
            };
            let request = &buffers[index][..length.min(UDP_REQUEST_MAX)];
            let context = shared.context(source.ip(), Transport::Udp, tally, now);
            let answer = &mut answers[count];
            if answer_datagram(shared, request, &context, arrived, &mut rng, answer) {
                recipients[count] = Some(SockaddrStorage::from(source));
                count += 1;
            }
        }
        // A datagram the kernel refuses is dropped, as a lost one would be; the rest still go.
        let mut slices = [[IoSlice::new(&[])]; UDP_BATCH];
        for (slice, answer) in slices.iter_mut().zip(&answers[..count]) {
            *slice = [IoSlice::new(answer)];
        }
        let mut next = 0;
        while next < count {
            let sent = sendmmsg(
                fd,
                &mut sent_headers,
                &slices[next..count],
                &recipients[next..count],
                [],
                MsgFlags::empty(),
            )
            .map_or(0, |results| results.count());
            next += sent.max(1);
        }
    }
}

/// Writes what one datagram, come at `arrived`, gets into `response`: the answer, or a
/// truncated reply (a rate-limited client is sent to TCP now and then). False when it gets
/// nothing.
fn answer_datagram(
    shared: &Shared,
    request: &[u8],
    context: &QueryContext<'_>,
    arrived: Instant,
    rng: &mut SmallRng,
    response: &mut Vec<u8>,
) -> bool {
    let mut verdict = shared.limiter.as_ref().map_or(Verdict::Send, |limiter| {
        limiter.check(context.source, arrived)
    });
    // A client with a valid server cookie has proven its address: it is not limited.
    if let (Verdict::Slip | Verdict::Drop, Some(secret)) = (verdict, &shared.cookie_secret)
        && crate::answer::has_valid_cookie(request, secret, context.source, context.now)
    {
        verdict = Verdict::Send;
    }
    shared.stats.rate_limited(verdict);
    match verdict {
        Verdict::Send => respond_into(&shared.catalog.load(), request, context, rng, response),
        Verdict::Slip => match truncated(request) {
            Some(truncated) => {
                response.clear();
                response.extend_from_slice(&truncated);
                true
            }
            None => false,
        },
        Verdict::Drop => false,
    }
}

/// The client's address as the standard library writes it (UDP sockets only see IP ones).
fn socket_address(address: &nix::sys::socket::SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = address.as_sockaddr_in() {
        return Some(std::net::SocketAddrV4::from(*v4).into());
    }
    address
        .as_sockaddr_in6()
        .map(|v6| std::net::SocketAddrV6::from(*v6).into())
}

/// An empty truncated response to `request`, which sends the client to TCP.
fn truncated(request: &[u8]) -> Option<Vec<u8>> {
    let request = Message::from_vec(request).ok()?;
    if request.metadata.message_type != MessageType::Query {
        return None;
    }
    let mut response = Message::new(
        request.metadata.id,
        MessageType::Response,
        request.metadata.op_code,
    );
    response.metadata.truncation = true;
    response.metadata.recursion_desired = request.metadata.recursion_desired;
    response.add_queries(request.queries);
    response.to_vec().ok()
}

async fn serve_tcp(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    // Who holds each connection, to count them per client.
    let mut holders: HashMap<tokio::task::Id, IpAddr> = HashMap::new();
    let mut per_client: HashMap<IpAddr, usize> = HashMap::new();
    let mut backoff = Duration::ZERO;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, source) = match accepted {
                    Ok(accepted) => {
                        backoff = Duration::ZERO;
                        accepted
                    }
                    // Out of file descriptors, most likely: retrying at once would spin.
                    Err(_) => {
                        backoff = (backoff * 2).clamp(Duration::from_millis(10), ACCEPT_BACKOFF_MAX);
                        tokio::time::sleep(backoff).await;
                        continue;
                    }
                };
                let held = per_client.get(&source.ip()).copied().unwrap_or(0);
                // Full, or this client holds its share: dropping the stream closes it.
                if connections.len() >= shared.config.max_tcp_connections {
                    shared.stats.tcp_closed(TcpClosed::Full);
                } else if held >= shared.config.max_tcp_per_client {
                    shared.stats.tcp_closed(TcpClosed::PerClient);
                } else {
                    let task = connections.spawn(serve_connection(stream, source, shared.clone()));
                    holders.insert(task.id(), source.ip());
                    per_client.insert(source.ip(), held + 1);
                }
            }
            Some(ended) = connections.join_next_with_id(), if !connections.is_empty() => {
                let id = match ended {
                    Ok((id, ())) => id,
                    Err(error) => error.id(),
                };
                if let Some(client) = holders.remove(&id)
                    && let Some(held) = per_client.get_mut(&client)
                {
                    *held -= 1;
                    if *held == 0 {
                        per_client.remove(&client);
                    }
                }
            }
        }
    }
}

async fn serve_connection(mut stream: TcpStream, source: SocketAddr, shared: Arc<Shared>) {
    let mut rng = SmallRng::from_rng(&mut rand::rng());
    let patience = shared.config.tcp_idle;
    loop {
        let Ok(Ok(length)) = tokio::time::timeout(patience, stream.read_u16()).await else {
            return;
        };
        let mut request = vec![0u8; usize::from(length)];
        let Ok(Ok(_)) = tokio::time::timeout(patience, stream.read_exact(&mut request)).await
        else {
            return;
        };
        let context = shared.context(source.ip(), Transport::Tcp, TCP_TALLY, unix_now());
        for response in respond(&shared.catalog.load(), &request, &context, &mut rng) {
            let Ok(length) = u16::try_from(response.len()) else {
                return;
            };
            // A client that does not take its answers (its window shut) is let go.
            let written = tokio::time::timeout(patience, async {
                stream.write_u16(length).await?;
                stream.write_all(&response).await
            })
            .await;
            match written {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return,
                Err(_) => {
                    shared.stats.tcp_closed(TcpClosed::Stalled);
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_udp_thread_pauses_to_gather_only_when_several_datagrams_were_waiting_and_more_fit() {
        for (taken, pause) in [
            // The wake-up timeout or an error: read again at once.
            (0, None),
            // A trickle: the next query must not wait.
            (1, None),
            (2, Some(UDP_GATHER)),
            (UDP_BATCH - 1, Some(UDP_GATHER)),
            // A full batch: more is waiting, and a pause would cap the thread's rate.
            (UDP_BATCH, None),
        ] {
            assert_eq!(gathering_pause(taken), pause, "{taken} taken");
        }
    }
}
