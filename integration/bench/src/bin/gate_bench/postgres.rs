//! Guarded (`FencedUpdate`) against plain PostgreSQL UPDATEs at 1, 8 and 32
//! concurrent connections, each its own client on its own row.

use std::time::Instant;

use fencing::FencingToken;
use fencing_bench::{bounded, median};
use fencing_harness::postgres::server::PgServer;
use fencing_postgres::{FencedUpdate, PreparedUpdate};
use tokio::task::JoinSet;
use tokio_postgres::{Client, Statement};

use crate::Res;

/// Connection counts measured, in order.
const CONNECTIONS: [usize; 3] = [1, 8, 32];
/// Rounds per connection count; each round runs every side once, the
/// first side rotating from round to round.
const ROUNDS: usize = 6;
/// Fewest updates a connection makes per side and round, so at 32
/// connections each still runs long enough to overlap the others.
const MIN_PER_CONN: usize = 100;
/// Untimed updates per connection and side before the first round: past
/// PostgreSQL's switch to a generic plan (after 5 executions) and a cold
/// cache.
const WARM_UP: usize = 20;
/// The guarded/plain ratio the performance issue asks for.
const TARGET: f64 = 1.05;

/// The statements timed against each other.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// `UPDATE plain SET balance = $2 WHERE id = $1`.
    Plain,
    /// The bare conditional `UPDATE ... WHERE id = $1 AND fence <= $3`,
    /// which cannot say why it wrote nothing: the floor of a guarded write,
    /// so a gap between guarded and plain can be split into the fence
    /// column's cost and ours.
    Bare,
    /// `FencedUpdate`: the conditional UPDATE, reporting only when it
    /// wrote nothing (never here: every token is the next one).
    Guarded,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Bare => "bare",
            Kind::Guarded => "guarded",
        }
    }
}

/// The sides timed at every connection count, in the order of a round's
/// first turn.
const KINDS: [Kind; 3] = [Kind::Plain, Kind::Bare, Kind::Guarded];

/// One connection: its client, its row and its row's next token.
struct Conn {
    id: i64,
    client: Client,
    plain: Statement,
    bare: Statement,
    guarded: PreparedUpdate,
    /// The last token written to this row's fence: every fenced update
    /// presents the next one, so none is refused.
    token: u64,
}

/// What one side measured in one round.
#[derive(Clone, Copy)]
struct Sample {
    updates_per_s: f64,
    median_us: f64,
}

/// Starts a server, runs every connection count, and returns the CSV rows
/// `connections,side,updates_per_s,median_us` (plain, bare and guarded).
pub async fn run(per_side: usize) -> Res<Vec<String>> {
    let pg = PgServer::start().await?;
    let max = CONNECTIONS.iter().copied().max().unwrap_or(1);
    create_tables(&pg, max).await?;
    let mut conns = Vec::with_capacity(max);
    for id in 1..=max {
        conns.push(Conn::open(&pg, i64::try_from(id)?).await?);
    }
    for kind in KINDS {
        phase(&mut conns, kind, max, WARM_UP).await?;
    }
    println!(
        "gate-bench: PostgreSQL {}, one client and one row per connection, {per_side} updates per side and round shared among the connections (at least {MIN_PER_CONN} each), {ROUNDS} rounds",
        pg.major_version()
    );
    let mut rows = Vec::new();
    for c in CONNECTIONS {
        let per_conn = (per_side / c).max(MIN_PER_CONN);
        let figures = rounds(&mut conns, c, per_conn).await?;
        report(pg.major_version(), c, &figures);
        for (kind, s) in KINDS.iter().zip(&figures) {
            rows.push(format!(
                "{c},{},{:.1},{:.1}",
                kind.name(),
                s.updates_per_s,
                s.median_us
            ));
        }
    }
    drop(conns);
    Ok(rows)
}

/// `plain(id, balance)` and `fenced(id, balance, fence)`, rows 1..=`rows`.
async fn create_tables(pg: &PgServer, rows: usize) -> Res<()> {
    let client = pg.client().await?;
    let sql = format!(
        "CREATE TABLE plain (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL);
         CREATE TABLE fenced (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL, fence BIGINT NOT NULL DEFAULT 0);
         INSERT INTO plain SELECT g, 0 FROM generate_series(1, {rows}) g;
         INSERT INTO fenced (id, balance) SELECT g, 0 FROM generate_series(1, {rows}) g;"
    );
    bounded("creating the tables", client.batch_execute(&sql)).await??;
    Ok(())
}

/// `ROUNDS` rounds of every side at `c` connections; per side (in
/// `KINDS` order) the median over the rounds of the throughput and
/// of the round's median latency.
async fn rounds(conns: &mut Vec<Conn>, c: usize, per_conn: usize) -> Res<Vec<Sample>> {
    let kinds = KINDS;
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); kinds.len()];
    for round in 0..ROUNDS {
        for turn in 0..kinds.len() {
            let k = (turn + round) % kinds.len();
            let s = phase(conns, kinds[k], c, per_conn).await?;
            println!(
                "round {} {c:>2} conn {:<7}: {:>7.0} updates/s, median {:>7.1} µs",
                round + 1,
                kinds[k].name(),
                s.updates_per_s,
                s.median_us
            );
            samples[k].push(s);
        }
    }
    Ok(samples
        .into_iter()
        .map(|s| Sample {
            updates_per_s: median(s.iter().map(|s| s.updates_per_s).collect()),
            median_us: median(s.iter().map(|s| s.median_us).collect()),
        })
        .collect())
}

/// The summary line of one connection count (`figures` in `KINDS` order).
fn report(major: u32, c: usize, figures: &[Sample]) {
    let [p, b, g] = figures else {
        return;
    };
    println!(
        "gate-bench: PostgreSQL {major} {c} conn: guarded {:.0} updates/s, median {:.1} µs vs plain {:.0} updates/s, median {:.1} µs; guarded/plain time per update {:.2}, median latency {:.2} (target <= {TARGET}); bare fenced UPDATE (the floor) {:.0} updates/s, bare/plain time per update {:.2}",
        g.updates_per_s,
        g.median_us,
        p.updates_per_s,
        p.median_us,
        p.updates_per_s / g.updates_per_s,
        g.median_us / p.median_us,
        b.updates_per_s,
        p.updates_per_s / b.updates_per_s,
    );
}

/// The first `c` connections each make `per_conn` updates of `kind` at
/// once (each on its own task); throughput over the wall time from the
/// first start to the last finish, median over all their latencies.
async fn phase(conns: &mut Vec<Conn>, kind: Kind, c: usize, per_conn: usize) -> Res<Sample> {
    let mut tasks = JoinSet::new();
    let started = Instant::now();
    for mut conn in conns.drain(..c) {
        tasks.spawn(async move {
            let latencies = conn.run(kind, per_conn).await;
            (conn, latencies)
        });
    }
    let mut latencies = Vec::with_capacity(c * per_conn);
    while let Some(done) = tasks.join_next().await {
        let (conn, result) = done?;
        conns.push(conn);
        latencies.extend(result?);
    }
    let wall = started.elapsed().as_secs_f64();
    conns.sort_by_key(|conn| conn.id);
    Ok(Sample {
        updates_per_s: (c * per_conn) as f64 / wall,
        median_us: median(latencies),
    })
}

impl Conn {
    /// A new client for row `id`, with the three statements prepared.
    async fn open(pg: &PgServer, id: i64) -> Res<Conn> {
        let client = pg.client().await?;
        let plain = client.prepare("UPDATE plain SET balance = $2 WHERE id = $1");
        let plain = bounded("preparing the plain UPDATE", plain).await??;
        let bare = client
            .prepare("UPDATE fenced SET balance = $2, fence = $3 WHERE id = $1 AND fence <= $3");
        let bare = bounded("preparing the bare fenced UPDATE", bare).await??;
        let guarded = FencedUpdate::new("fenced", "id", "fence", &["balance"])?;
        let guarded = bounded("preparing the FencedUpdate", guarded.prepare(&client)).await??;
        Ok(Conn {
            id,
            client,
            plain,
            bare,
            guarded,
            token: 0,
        })
    }

    /// `n` updates of `kind` one after the other; their latencies in µs.
    async fn run(&mut self, kind: Kind, n: usize) -> Res<Vec<f64>> {
        let mut latencies = Vec::with_capacity(n);
        for i in 0..n {
            let balance = i64::try_from(i)?;
            let started = Instant::now();
            let written = bounded(kind.name(), self.update(kind, balance)).await??;
            latencies.push(started.elapsed().as_secs_f64() * 1e6);
            if written != 1 {
                let name = kind.name();
                return Err(
                    format!("{name} UPDATE of row {} wrote {written} rows", self.id).into(),
                );
            }
        }
        Ok(latencies)
    }

    /// One update of this connection's row; the rows written.
    async fn update(&mut self, kind: Kind, balance: i64) -> Res<u64> {
        let id = self.id;
        Ok(match kind {
            Kind::Plain => self.client.execute(&self.plain, &[&id, &balance]).await?,
            Kind::Bare => {
                let token = i64::try_from(self.next_token())?;
                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
                    [&id, &balance, &token];
                self.client.execute(&self.bare, &params).await?
            }
            Kind::Guarded => {
                let token = FencingToken::new(self.next_token());
                self.guarded
                    .execute(&self.client, &id, &[&balance], token)
                    .await?
            }
        })
    }

    fn next_token(&mut self) -> u64 {
        self.token += 1;
        self.token
    }
}
