package meshsim

// For the external test package: TestMeshOnRealCluster's comparison with a live linkerd CLI
// uses the same comparison as TestInjectorMatchesLinkerd.
var (
	MatchLinkerd    = matchLinkerd
	ParseDeployment = parseDeployment
)
