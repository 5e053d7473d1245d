package replay

// PlanWave plans sequences of the given lengths against the engine's memory budgets without running
// anything: the same plan Run makes before its first layer (a dataset job uses it to cut its waves so that
// each one is a single read of the weights). It returns an error wrapping ErrBudget when the budgets
// cannot hold them.
func (e *Engine) PlanWave(lens []int) (WavePlan, error) { return e.planWave(lens) }
