//! gate-bench: what a gate costs (figures printed, never asserted).
//!
//! 1. `MemoryGate` admits with 1, 2, 4, 8 and 16 std threads, all on one
//!    resource and each on its own resource, unbound (`admit_now`, which
//!    holds the resource's writer mutex) and bound (`admit_from_now`, one
//!    lock-free compare-and-swap). The figure is the time one thread spends
//!    per admit: total wall time × threads / total admits (flat when the
//!    gate scales; above the machine's core count the threads also wait for
//!    a core, which the output says). Every admit presents a new token, so
//!    on one resource a thread that fell behind is refused as stale (the
//!    share is printed). The 1-thread points are the old single-thread
//!    figures; target < 50 ns.
//! 2. `FileGate` admits per second on a temporary directory: raises (each a
//!    new higher token, which rewrites the file and fsyncs it and its
//!    directory before returning) and retries at the mark (no I/O).
//! 3. `ValidatingGate` over a `MemoryGate` with a `LocalSource` against the
//!    plain `MemoryGate`: the first admit of each grant (a raise, which
//!    costs the validating gate one `holder()` lookup) and retries at the
//!    mark (no lookup).
//! 4. A guarded UPDATE (`FencedUpdate`, fence column) against the same
//!    plain UPDATE on one throwaway PostgreSQL server, with 1, 8 and 32
//!    connections, each its own client updating its own row (so no row-lock
//!    contention) with increasing tokens: throughput and median latency per
//!    side, and guarded/plain (target <= 1.05). Rounds rotate which side
//!    runs first, so drift of the server hits both. Throughput is all
//!    connections' updates over the wall time of the round; the latency is
//!    the median over the rounds of each round's median. The bare
//!    conditional UPDATE (no refusal report) is timed as a third side: the
//!    floor of a guarded write, the fence column's own cost.
//!
//! 5. `EtcdGate` and `ZkGate` on real 3-member clusters (etcd 3.6,
//!    ZooKeeper 3.9): a raise and a retry at the mark, and the guarded
//!    write of data kept in the cluster (`guarded_txn`, `guarded_multi`)
//!    against the same write sent plain (see `gate_bench/cluster.rs`).
//!
//! `--iterations N` (default 2000) sizes every section but the validating
//! one: PostgreSQL runs N updates per side, round and connection count,
//! shared among the connections (each at least 100); each MemoryGate point
//! is N × 2500 admits shared among its threads; the FileGate times N / 4
//! raises (at least 20) and N × 50 retries; the clusters N / 4 requests per
//! kind and round (at least 50). The defaults finish in well
//! under a minute on 2 cores (about 45 s when idle).
//!
//! `--csv DIR` also writes, one header line each and plain numbers:
//! `gates-memory.csv` (threads,layout,ns_per_admit; the unbound curve,
//! layout one_resource|distinct), `gates-file.csv` (kind,admits_per_s; kind
//! raise|retry) and `gates-postgres.csv`
//! (connections,side,updates_per_s,median_us; side plain|bare|guarded) and
//! `gates-cluster.csv` (backend,kind,median_us; kind raise|equal|guarded|plain).
//!
//! `--sections` picks some of memory, file, validating, postgres, cluster
//! (default: all).

#[path = "gate_bench/cluster.rs"]
mod cluster;
// The sections live in gate_bench/ (a crate root resolves `mod` paths
// beside itself, hence the attributes).
#[path = "gate_bench/file.rs"]
mod file;
#[path = "gate_bench/memory.rs"]
mod memory;
#[path = "gate_bench/postgres.rs"]
mod postgres;
#[path = "gate_bench/validating.rs"]
mod validating;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use fencing_bench::{main_with, BoxError};

/// What every section returns.
type Res<T> = Result<T, BoxError>;

#[derive(clap::Parser)]
#[command(about = "MemoryGate, FileGate, ValidatingGate and fenced PostgreSQL UPDATE costs")]
struct Args {
    /// Size of each section (see the program's doc): PostgreSQL updates per
    /// side, round and connection count, shared among the connections.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    iterations: u64,
    /// Also write gates-memory.csv, gates-file.csv and gates-postgres.csv
    /// into this directory (created if missing).
    #[arg(long, value_name = "DIR")]
    csv: Option<PathBuf>,
    /// The sections to run, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "memory,file,validating,postgres,cluster"
    )]
    sections: Vec<Section>,
}

#[derive(Clone, Copy, PartialEq, clap::ValueEnum)]
enum Section {
    Memory,
    File,
    Validating,
    Postgres,
    Cluster,
}

fn main() -> ExitCode {
    let args = <Args as clap::Parser>::parse();
    main_with("gate-bench", run(args))
}

async fn run(args: Args) -> Res<()> {
    // Fail on a bad directory before minutes of measuring, not after.
    if let Some(dir) = &args.csv {
        std::fs::create_dir_all(dir).map_err(|e| format!("--csv {}: {e}", dir.display()))?;
    }
    let csv = args.csv.as_deref();
    let n = args.iterations;
    let on = |section| args.sections.contains(&section);
    if on(Section::Memory) {
        let rows = memory::run(n.saturating_mul(memory::ADMITS_PER_ITERATION))?;
        write_csv(
            csv,
            "gates-memory.csv",
            "threads,layout,ns_per_admit",
            &rows,
        )?;
    }
    if on(Section::File) {
        let rows = file::run((n / 4).max(file::MIN_RAISES), n.saturating_mul(50)).await?;
        write_csv(csv, "gates-file.csv", "kind,admits_per_s", &rows)?;
    }
    if on(Section::Validating) {
        validating::run().await?;
    }
    if on(Section::Postgres) {
        let rows = postgres::run(usize::try_from(n)?).await?;
        let header = "connections,side,updates_per_s,median_us";
        write_csv(csv, "gates-postgres.csv", header, &rows)?;
    }
    if on(Section::Cluster) {
        let rows: Vec<String> = cluster::run(usize::try_from(n / 4)?.max(50))
            .await?
            .iter()
            .map(|r| format!("{},{},{:.1}", r.backend, r.kind, r.median_us))
            .collect();
        write_csv(csv, "gates-cluster.csv", "backend,kind,median_us", &rows)?;
    }
    Ok(())
}

/// Writes `header` and `rows` (already comma-joined plain numbers and
/// names) to `dir/name`; nothing without `--csv`.
fn write_csv(dir: Option<&Path>, name: &str, header: &str, rows: &[String]) -> Res<()> {
    let Some(dir) = dir else {
        return Ok(());
    };
    let path = dir.join(name);
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?,
    );
    writeln!(f, "{header}")?;
    for row in rows {
        writeln!(f, "{row}")?;
    }
    f.flush()?;
    println!("gate-bench: wrote {}", path.display());
    Ok(())
}
