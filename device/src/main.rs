//! `ism-emu serve`: run the emulated ISM functions of one machine.
//! `ism-emu observe`: look at a running emulator from the host.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use serde_json::Value;

use ism_emu::fabric::Fabric;
use ism_emu::observer::Observer;
use ism_emu::{default_gid, server};

#[derive(Parser)]
#[command(
    version,
    about = "Emulated IBM ISM (SMC-D) PCI functions for QEMU s390x guests, over vfio-user"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve ISM functions, one vfio-user socket each, all on one fabric.
    Serve {
        /// Fabric (machine) CHID: nonzero and outside 0xff00-0xffff, as SMC-Dv2 requires.
        #[arg(long, default_value = "0x1234", value_parser = parse_chid)]
        chid: u16,
        /// A vfio-user socket to serve one function on (repeat for more functions).
        /// Functions are named ism0, ism1, ... in this order.
        #[arg(long = "socket", required = true)]
        sockets: Vec<PathBuf>,
        /// Control socket for `ism-emu observe`.
        #[arg(long)]
        control: Option<PathBuf>,
        /// Append the event stream (JSON lines) to this file.
        #[arg(long)]
        events: Option<PathBuf>,
    },
    /// Query a running emulator through its control socket.
    Observe {
        #[arg(long, default_value = "/tmp/ism-emu.ctl")]
        control: PathBuf,
        #[command(subcommand)]
        what: Observe,
    },
}

#[derive(Subcommand, Clone, Copy)]
enum Observe {
    /// The functions: GIDs, attachment, traffic counters.
    Functions,
    /// Every DMB seen: owner, peer, state, connections, reuse and zeroing.
    Dmbs,
    /// The recent connections on every DMB: bytes, close, reuse verdict, zeroing delay.
    Conns,
    /// Functions, DMBs and a verdict on zeroing and reuse.
    Summary,
    /// Print events as they happen (JSON lines).
    Follow,
    /// The raw snapshot as JSON.
    Json,
}

fn parse_chid(s: &str) -> Result<u16, String> {
    let v = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u16::from_str_radix(hex, 16),
        None => s.parse(),
    }
    .map_err(|e| format!("not a 16-bit number: {e}"))?;
    if v == 0 || v >= 0xff00 {
        return Err("the CHID must be nonzero and below 0xff00".into());
    }
    Ok(v)
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_timestamp_millis()
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Serve {
            chid,
            sockets,
            control,
            events,
        } => serve(chid, sockets, control, events),
        Cmd::Observe { control, what } => observe(&control, what),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ism-emu: {e}");
            ExitCode::FAILURE
        }
    }
}

fn serve(
    chid: u16,
    sockets: Vec<PathBuf>,
    control: Option<PathBuf>,
    events: Option<PathBuf>,
) -> Result<(), String> {
    let file = match &events {
        Some(path) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| format!("cannot open event file {}: {e}", path.display()))?,
        ),
        None => None,
    };
    let functions = (0..sockets.len())
        .map(|i| (format!("ism{i}"), default_gid(chid, i)))
        .collect();
    let fabric = Arc::new(Fabric::new(chid, functions, Observer::new(file)));
    log::info!("fabric CHID {chid:#06x} with {} function(s)", sockets.len());
    server::run(fabric, &sockets, control.as_deref()).map_err(|e| {
        let mut msg = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            msg.push_str(&format!(": {s}"));
            source = s.source();
        }
        msg
    })
}

fn request(control: &PathBuf, what: &str) -> Result<UnixStream, String> {
    let mut stream = UnixStream::connect(control).map_err(|e| {
        format!(
            "cannot reach the emulator at {}: {e} (is `ism-emu serve --control {}` running?)",
            control.display(),
            control.display()
        )
    })?;
    writeln!(stream, "{what}").map_err(|e| e.to_string())?;
    Ok(stream)
}

fn observe(control: &PathBuf, what: Observe) -> Result<(), String> {
    if let Observe::Follow = what {
        let stream = request(control, "follow")?;
        for line in BufReader::new(stream).lines() {
            let line = line.map_err(|e| e.to_string())?;
            println!("{line}");
        }
        return Ok(());
    }
    let mut line = String::new();
    BufReader::new(request(control, "snapshot")?)
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    let snap: Value = serde_json::from_str(&line).map_err(|e| format!("bad snapshot: {e}"))?;
    match what {
        Observe::Json => println!("{line}"),
        Observe::Functions => print_functions(&snap),
        Observe::Dmbs => print_dmbs(&snap),
        Observe::Conns => print_conns(&snap),
        Observe::Summary => {
            print_functions(&snap);
            println!();
            print_dmbs(&snap);
            println!();
            print_verdict(&snap);
        }
        Observe::Follow => {}
    }
    Ok(())
}

fn u(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

fn s(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or("-")
        .to_string()
}

fn print_functions(snap: &Value) {
    println!("fabric CHID {}", s(snap, "chid"));
    println!(
        "{:<6} {:<18} {:<8} {:>5} {:>9} {:>12} {:>9} {:>12} {:>8} {:>6} {:>6} {:>8}",
        "FUNC",
        "GID",
        "ATTACHED",
        "DMBS",
        "MOVES_OUT",
        "BYTES_OUT",
        "MOVES_IN",
        "BYTES_IN",
        "SIGNALS",
        "EVENTS",
        "IRQS",
        "REJECTED"
    );
    for f in snap["functions"].as_array().into_iter().flatten() {
        let c = &f["counters"];
        println!(
            "{:<6} {:<18} {:<8} {:>5} {:>9} {:>12} {:>9} {:>12} {:>8} {:>6} {:>6} {:>8}",
            s(f, "name"),
            s(f, "gid"),
            if f["attached"].as_bool() == Some(true) {
                "yes"
            } else {
                "no"
            },
            u(f, "dmbs_owned"),
            u(c, "moves_out"),
            u(c, "bytes_out"),
            u(c, "moves_in"),
            u(c, "bytes_in"),
            u(c, "signals_in"),
            u(c, "events_in"),
            u(c, "interrupts"),
            u(c, "moves_rejected") + u(c, "command_errors"),
        );
    }
}

fn print_dmbs(snap: &Value) {
    println!(
        "{:<6} {:<14} {:<18} {:>7} {:>4} {:<12} {:>5} {:>6} {:>5} {:>5} {:>6} {:>14} {:>12}",
        "FUNC",
        "TOKEN",
        "PEER",
        "LEN",
        "IDX",
        "STATE",
        "CONNS",
        "REUSES",
        "CLEAN",
        "STALE",
        "ZEROED",
        "ZERO_MS(med/max)",
        "BYTES"
    );
    for d in snap["dmbs"].as_array().into_iter().flatten() {
        let mut delays: Vec<f64> = d["zero_delays_ms"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_f64)
            .collect();
        delays.sort_by(f64::total_cmp);
        let delay = match (delays.get(delays.len() / 2), delays.last()) {
            (Some(med), Some(max)) => format!("{med:.1}/{max:.1}"),
            _ => "-".into(),
        };
        let state = s(d, "state");
        let state = if d["registered"].as_bool() == Some(true) {
            state
        } else {
            format!("{state}/unreg")
        };
        println!(
            "{:<6} {:<14} {:<18} {:>7} {:>4} {:<12} {:>5} {:>6} {:>5} {:>5} {:>6} {:>14} {:>12}",
            s(d, "function"),
            format!("{:#x}", u(d, "token")),
            format!("{:#018x}", u(d, "rgid")),
            u(d, "len"),
            u(d, "sba_idx"),
            state,
            u(d, "connections"),
            u(d, "reuses"),
            u(d, "clean_reuses"),
            u(d, "stale_reuses"),
            u(d, "zeroed_after_close"),
            delay,
            u(d, "bytes"),
        );
    }
}

fn print_conns(snap: &Value) {
    println!(
        "{:<6} {:<14} {:>5} {:>12} {:>10} {:>12} {:<6} {:<13} {:>11}",
        "FUNC", "TOKEN", "CONN", "OPENED(s)", "OPEN_MS", "BYTES", "CLOSE", "REUSE", "ZEROED_MS"
    );
    let start = snap["dmbs"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|d| d["recent"].as_array().into_iter().flatten())
        .filter_map(|c| c["opened_us"].as_u64())
        .min()
        .unwrap_or(0);
    for d in snap["dmbs"].as_array().into_iter().flatten() {
        for c in d["recent"].as_array().into_iter().flatten() {
            let opened = u(c, "opened_us");
            let open_ms = c["closed_us"].as_u64().map_or("-".to_string(), |closed| {
                format!("{:.1}", (closed.saturating_sub(opened)) as f64 / 1e3)
            });
            let reuse = match c["reuse_clean"].as_bool() {
                None => "-".to_string(),
                Some(true) => "clean".to_string(),
                Some(false) => format!("STALE {}B", u(c, "stale_bytes")),
            };
            let zeroed = match (c["zeroed_after_ms"].as_f64(), c["not_zeroed"].as_bool()) {
                (Some(ms), _) => format!("{ms:.1}"),
                (None, Some(true)) => "never".to_string(),
                _ => "-".to_string(),
            };
            println!(
                "{:<6} {:<14} {:>5} {:>12.3} {:>10} {:>12} {:<6} {:<13} {:>11}",
                s(d, "function"),
                format!("{:#x}", u(d, "token")),
                u(c, "conn"),
                opened.saturating_sub(start) as f64 / 1e6,
                open_ms,
                u(c, "bytes"),
                c["how"].as_str().unwrap_or("-"),
                reuse,
                zeroed,
            );
        }
    }
}

fn print_verdict(snap: &Value) {
    let dmbs: Vec<&Value> = snap["dmbs"].as_array().into_iter().flatten().collect();
    let sum = |key: &str| dmbs.iter().map(|d| u(d, key)).sum::<u64>();
    println!(
        "{} DMBs, {} connections, {} closes, {} zeroed after close, {} reuses ({} clean, {} stale)",
        dmbs.len(),
        sum("connections"),
        sum("closes"),
        sum("zeroed_after_close"),
        sum("reuses"),
        sum("clean_reuses"),
        sum("stale_reuses")
    );
    if sum("stale_reuses") > 0 {
        println!("VERDICT: STALE — a reused DMB still held an earlier connection's bytes");
    } else if sum("reuses") > 0 {
        println!("VERDICT: CLEAN — every reused DMB was zero when the next connection started");
    } else {
        println!("VERDICT: no DMB reuse seen");
    }
}
