/* gpu_warp_emu: 32 coroutines emulate a warp on the host, for tests that run the kernels' code without a GPU. */
#ifndef GPU_WARP_EMU_H
#define GPU_WARP_EMU_H
/* Include after td_gpu_kernels.cu (with TD_GPU_EMU defined): this defines
 * the td_lane / td_emu_exchange / td_ballot hooks it declares. */
#include <functional>
#include <vector>

#include <ucontext.h>

#ifndef __CUDA_ARCH__

/* The 32 lanes are coroutines (ucontext) of one thread, switched round
 * robin at every collective: when lane 31 reaches a barrier, every lane has
 * reached it, and lane 0 resumes. */
static uint32_t emu_lane_id;
static uint64_t emu_slots[32];
static ucontext_t emu_ctx[32], emu_main;
static std::function<void(uint32_t)> emu_fn;

static void emu_barrier()
{
	uint32_t me = emu_lane_id;
	emu_lane_id = (me + 1) & 31;
	swapcontext(&emu_ctx[me], &emu_ctx[emu_lane_id]);
	emu_lane_id = me;
}

uint32_t td_lane(void)
{
	return emu_lane_id;
}

uint64_t td_emu_exchange(uint64_t v, uint32_t src)
{
	emu_slots[emu_lane_id] = v;
	emu_barrier();
	uint64_t r = emu_slots[src & 31];
	emu_barrier();
	return r;
}

uint32_t td_ballot(bool p)
{
	emu_slots[emu_lane_id] = p;
	emu_barrier();
	uint32_t m = 0;
	for (uint32_t i = 0; i < 32; i++)
		if (emu_slots[i])
			m |= 1u << i;
	emu_barrier();
	return m;
}

static void emu_entry(int lane)
{
	emu_lane_id = (uint32_t)lane;
	emu_fn((uint32_t)lane);
	emu_lane_id = (uint32_t)(lane + 1) & 31; /* uc_link resumes the next lane */
}

/* Run fn(lane) for the 32 lanes of one emulated warp. */
static void warp_run(std::function<void(uint32_t)> fn)
{
	static std::vector<char> stacks(32u << 18);
	emu_fn = fn;
	for (int l = 0; l < 32; l++) {
		getcontext(&emu_ctx[l]);
		emu_ctx[l].uc_stack.ss_sp = stacks.data() + ((size_t)l << 18);
		emu_ctx[l].uc_stack.ss_size = 1u << 18;
		emu_ctx[l].uc_link = l == 31 ? &emu_main : &emu_ctx[l + 1];
		makecontext(&emu_ctx[l], (void (*)())emu_entry, 1, l);
	}
	emu_lane_id = 0;
	swapcontext(&emu_main, &emu_ctx[0]);
}
#endif

#endif
