//! `l1gate endpoints list | search | get`: the endpoint registry, with URLs a client can use.

use anyhow::Context as _;
use l1gate::config;

pub(crate) fn run(command: l1gate::cli::EndpointsCommand) -> anyhow::Result<()> {
    use gateway::registry::{self, Ecosystem, Filter, NodeType, Protocol};
    use l1gate::cli::EndpointsAction;
    let file = config::load_optional(command.config.as_deref())?;
    let settings = command.settings.or(file).resolve()?;
    let filter = Filter {
        ecosystem: command
            .ecosystem
            .as_deref()
            .and_then(|e| Ecosystem::ALL.into_iter().find(|x| x.as_str() == e)),
        network: command.network.clone(),
        node_type: command.node_type.as_deref().map(|t| {
            if t.eq_ignore_ascii_case("archive") {
                NodeType::Archive
            } else {
                NodeType::Full
            }
        }),
        protocol: command.protocol.as_deref().map(|p| {
            if p == "wss" {
                Protocol::Wss
            } else {
                Protocol::Https
            }
        }),
    };
    let all = registry::chains(
        &settings.chains,
        &settings.public_http_url,
        &settings.public_grpc_url,
        &settings.chain_network,
    );
    let (name, found) = match &command.action {
        EndpointsAction::List => ("list", all),
        EndpointsAction::Search { keyword } => ("search", registry::search(all, keyword)),
        EndpointsAction::Get { chain } => ("get", registry::get(all, chain)),
    };
    let found = registry::filtered(found, &filter);
    if found.is_empty() {
        let what = match &command.action {
            EndpointsAction::List => "no chain".to_owned(),
            EndpointsAction::Search { keyword } => {
                format!("no chain or network matches {}", common::quoted(keyword))
            }
            EndpointsAction::Get { chain } => format!("no chain {}", common::quoted(chain)),
        };
        let message = format!("{what} with the filters given");
        let help = "`l1gate endpoints list` shows every chain; drop a filter to widen the search";
        if command.json {
            println!(
                "{}",
                serde_json::json!({
                    "ok": false,
                    "error": {"code": "not_found", "message": message, "help": help},
                })
            );
        } else {
            eprintln!("not found: {message}\n{help}");
        }
        std::process::exit(1);
    }
    let env_file = match &command.env_file {
        None => None,
        Some(path) => {
            let key = endpoint_key(command.key_env.as_deref(), command.key_stdin)?;
            let lines = registry::env_lines(&found, &key);
            registry::write_env_file(path, &lines)
                .with_context(|| format!("writing the environment file {}", path.display()))?;
            eprintln!(
                "wrote the API key and {} URLs to {} (mode 0600)",
                lines.len() - 1,
                path.display()
            );
            Some(path.display().to_string())
        }
    };
    if command.json {
        let mut body = serde_json::json!({
            "ok": true,
            "data": found,
            "meta": {
                "command": name,
                "timestamp": feeds::time::format_iso8601_ms(common::unix_now_ms()),
            },
        });
        if let Some(path) = env_file {
            body["meta"]["env_file"] = path.into();
        }
        println!("{}", serde_json::to_string_pretty(&body)?);
    } else {
        print!("{}", registry::to_text(&found));
    }
    Ok(())
}

/// The API key for `--env-file`, from `--key-env VAR` or `--key-stdin`.
fn endpoint_key(key_env: Option<&str>, key_stdin: bool) -> anyhow::Result<String> {
    let key = if let Some(var) = key_env {
        std::env::var(var)
            .with_context(|| format!("--key-env: the environment variable {var} is not set"))?
    } else if key_stdin {
        let mut line = String::new();
        std::io::stdin()
            .read_line(&mut line)
            .context("--key-stdin: reading standard input")?;
        line
    } else {
        anyhow::bail!(
            "--env-file needs the API key: --key-env VAR (a variable holding it) or --key-stdin \
             (the keys file holds only hashes of keys, and a key on the command line would show \
             in process lists)"
        );
    };
    let key = key.trim().to_owned();
    if key.is_empty() || key.contains(['\n', '\r', '=']) || key.contains(char::is_whitespace) {
        anyhow::bail!("the API key given is empty or not one line without spaces");
    }
    Ok(key)
}
