// `CofferStorage` — see DESIGN.md.
