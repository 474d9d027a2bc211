//! `l1gate routes`: every HTTP route the server would register.

use l1gate::config;

pub(crate) fn run(command: l1gate::cli::RoutesCommand) -> anyhow::Result<()> {
    let file = config::load_optional(command.config.as_deref())?;
    let settings = command.settings.or(file).resolve()?;
    let endpoints = l1gate::endpoints::Endpoints::of(&settings)?;
    if command.json {
        println!("{}", serde_json::to_string_pretty(&endpoints)?);
    } else {
        print!("{}", endpoints.to_text());
    }
    Ok(())
}
