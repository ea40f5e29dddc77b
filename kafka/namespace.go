package kafka

// In returns the admin requests of namespace ns instead of the Client's: the topics and groups they name are
// ns's (a stage reading another pipeline's topic checks it exists). It shares the Client's connections.
func (a *Admin) In(ns string) *Admin {
	cfg := a.cfg
	cfg.Namespace = ns
	return &Admin{cfg: cfg, cl: a.cl}
}
