//! `fence schema`: creates (or prints) the lock table a `postgres://`
//! source needs.

use fencing::postgres::{PgConfig, PgSource};

use crate::failure::Result;
use crate::source_arg::{self, SOURCE_ENV};

pub const EXAMPLES: &str = "Examples:
  fence schema --source 'postgres://admin@db:5432/app?table=fencing_locks'
  fence schema --source 'postgres://db/app?table=fencing_locks' --print > migrations/0042_fencing.sql";

#[derive(clap::Args, Debug)]
pub struct SchemaArgs {
    /// The lock table's database: postgres://[USER@]HOST[:PORT]/DB?table=NAME
    #[arg(long, value_name = "URL", env = SOURCE_ENV, hide_env_values = true)]
    source: String,

    /// Print the SQL instead of running it (for migrations run by hand)
    #[arg(long)]
    print: bool,
}

pub async fn schema(args: SchemaArgs) -> Result<()> {
    let context = format!(
        "--source {}",
        fencing::core::__private::redact_secrets(&args.source)
    );
    let config = PgConfig::from_url(&args.source).map_err(|e| source_arg::classify(e, &context))?;
    if args.print {
        let sql = PgSource::schema(&config.table).map_err(|e| source_arg::classify(e, &context))?;
        println!("{sql}");
        return Ok(());
    }
    PgSource::create_schema(&config)
        .await
        .map_err(|e| source_arg::classify(e, &context))?;
    println!("lock table {:?} is ready", config.table);
    Ok(())
}
