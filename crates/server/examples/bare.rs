//! The anchor of the HTTP throughput benchmark (`scripts/bench-http.sh`): the same front end
//! as `ratelab-server` (hyper's HTTP/1.1 connections, served by
//! [`ratelab_gateway::front::serve`] on the same runtime), answering `ok` with no limiting at
//! all, so the limiter's own cost is the gap between the two.
//!
//! `cargo run --profile production -p ratelab-server --example bare -- 127.0.0.1:9000 [workers]`

use std::io::Write as _;

/// The server's allocator, so that the gap to it is the limiter's alone.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let listen: std::net::SocketAddr = args.next().unwrap_or("127.0.0.1:0".into()).parse()?;
    // The same runtime as `ratelab-server --workers N` in memory (one worker: the
    // current-thread runtime).
    let workers = args.next().map(|n| n.parse()).transpose()?;
    let mut rt = ratelab_server::serve::runtime_for(workers, false);
    rt.enable_all().build()?.block_on(async {
        let listener = tokio::net::TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        writeln!(std::io::stdout(), "bare: listening on http://{addr}")?;
        // The server's own answer to an admitted request, with nothing in front of it.
        let ok = hyper_util::service::TowerToHyperService::new(ratelab_gateway::http::answer_ok::<
            hyper::body::Incoming,
        >());
        let forever = std::future::pending::<()>();
        // Written as ratelab-server writes its own answers.
        let writes = ratelab_gateway::front::Writes::Flat;
        ratelab_gateway::front::serve(listener, writes, |_| ok.clone(), forever).await;
        Ok(())
    })
}
