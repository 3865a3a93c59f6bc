// `CofferTesting` — see DESIGN.md.
