// `CofferVault` — see DESIGN.md.
