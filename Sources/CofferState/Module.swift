// `CofferState` — see DESIGN.md.
