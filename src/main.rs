//! The `attnviz` command: opens the desktop app, or runs a subcommand.

use std::process::ExitCode;

use clap::Parser;

/// mimalloc, and blocks of 2 MB or more in 2 MB pages ([`attnviz::alloc::Allocator`]).
#[global_allocator]
static ALLOCATOR: attnviz::alloc::Allocator = attnviz::alloc::Allocator;

fn main() -> ExitCode {
    let args = attnviz::cli::Cli::parse();
    // Every subcommand but `open`, which opens the app.
    if !matches!(args.command, None | Some(attnviz::cli::Command::Open(_))) {
        quiet_broken_pipe();
    }
    match attnviz::cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {}", one_line(&err));
            ExitCode::FAILURE
        }
    }
}

/// A subcommand piped into a reader that stops early (`attnviz stats … | head -1`) ends quietly,
/// as other command-line tools do, instead of panicking in `println!` on the closed pipe: the
/// default action of SIGPIPE, which Rust's runtime ignores. (Not for the app, whose sockets must
/// keep returning errors.)
fn quiet_broken_pipe() {
    #[cfg(target_os = "linux")]
    #[allow(unsafe_code)]
    // SAFETY: called at the start of main, before any thread exists; SIG_DFL is a valid handler.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// The error and its causes on one line, naming what is wrong and with which file or argument; a
/// cause whose text the message already quotes (library errors often include their source) is not
/// repeated.
fn one_line(err: &anyhow::Error) -> String {
    let mut message = err.to_string();
    for cause in err.chain().skip(1) {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
    }
    message.replace('\n', " ")
}
