"""The attention kernel's body (`_kernel`): one (q block, KV block) step of the online
softmax, written out for an `AttentionSpec` (score layout, operand layout, MXU dtype, exp
form, accumulator, sub-tiles, a bias, grouped-query loads). `attention.render` puts it
between the constants and the wrapper."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agents.llm.offline.attention import AttentionSpec


def _operand_casts(spec: AttentionSpec) -> tuple[str, str, str]:
    """(q dtype expression, k/v cast suffix, p cast suffix) for the spec's MXU dtype."""
    if spec.mxu_dtype == "bfloat16":
        return "jnp.bfloat16", ".astype(jnp.bfloat16)", ".astype(jnp.bfloat16)"
    if spec.mxu_dtype == "input":
        return "q_ref.dtype", "", ".astype(v_ref.dtype)"
    return "jnp.float32", ".astype(jnp.float32)", ""


def kernel_source(spec: AttentionSpec, *, bias: bool, grouped: bool, summary: str) -> str:
    """The `_kernel` body for `spec`: with a score bias input, grouped-query kv loads,
    and `summary` (the schedule's first part) as its docstring."""
    q_dtype, kv_cast, p_cast = _operand_casts(spec)
    staircase = spec.stair_tile > 0
    kv_rows = "kv" if staircase else "..."
    load_k, load_v = f"k_ref[{kv_rows}]{kv_cast}", f"v_ref[{kv_rows}]{kv_cast}"
    if grouped:  # the block's query heads read their kv heads' blocks, repeated (`_per_head`)
        load_k, load_v = (f"_per_head(k_ref[{kv_rows}]{kv_cast}, q)",
                          f"_per_head(v_ref[{kv_rows}]{kv_cast}, q)")
    exp = "jnp.exp2" if spec.exp == "exp2" else "jnp.exp"
    rows_layout = spec.layout == "rows"
    seq_on_lanes = spec.operands == "transposed"  # q (d, q), k and v (d, kv), out (d, q)
    axis = -1 if rows_layout else -2
    kv_dim, q_dim = ("s.ndim - 1", "s.ndim - 2") if rows_layout else ("s.ndim - 2", "s.ndim - 1")
    # contracted axes of (q, k) for the scores and of (p, v) for p v, by score and operand layout
    k_depth, v_kv = ("k.ndim - 2", "v.ndim - 1") if seq_on_lanes else ("k.ndim - 1", "v.ndim - 2")
    q_depth = "q.ndim - 2" if seq_on_lanes and not rows_layout else "q.ndim - 1"
    scores = (f"lax.dot_general(q, k, (((q.ndim - 1,), ({k_depth},)), _batch_dims(q)),\n"
              "                        preferred_element_type=jnp.float32)" if rows_layout else
              f"lax.dot_general(k, q, ((({k_depth},), ({q_depth},)), _batch_dims(q)),\n"
              "                        preferred_element_type=jnp.float32)  # (kv, q): q on lanes")
    pv = (f"lax.dot_general(p, v, (((p.ndim - 1,), ({v_kv},)), _batch_dims(v)),\n"
          "                             preferred_element_type=jnp.float32)" if rows_layout else
          f"lax.dot_general(v, p, ((({v_kv},), (p.ndim - 2,)), _batch_dims(v)),\n"
          "                             preferred_element_type=jnp.float32)  # (d, q)")
    normalized = "acc * (1.0 / row_sum)" if spec.normalize == "reciprocal" else "acc / row_sum"
    finish = normalized if rows_layout != seq_on_lanes else f"jnp.swapaxes({normalized}, -1, -2)"
    q_block = "jnp.swapaxes(q_ref[...], -1, -2)" if seq_on_lanes and rows_layout else "q_ref[rows]"
    # narrow MXU operands hold q times the scale exactly only where it is a power of two;
    # else the f32 scores take it after the dot (a one-hot softmax flips on that rounding)
    narrow = spec.mxu_dtype != "float32"
    scaled = "(({0}.astype(jnp.float32) * scale) if exact_scale else {0})" if narrow else \
        "({0}.astype(jnp.float32) * scale)"
    load_q = f"{scaled.format(q_block)}.astype({q_dtype})"
    scale_scores = ["        if not exact_scale:  # the scale q's dtype cannot hold, in f32",
                    "            s = s * scale"] if narrow else []
    bias_block = "b_ref[rows]" if rows_layout else "jnp.swapaxes(b_ref[...], -1, -2)"  # (kv, q)
    add_bias = [f"        s = s + {bias_block}.astype(jnp.float32)"
                + (" * _LOG2E  # the scores are in log2 units" if spec.exp == "exp2" else "")
                ] if bias else []
    mask = [*scale_scores, *add_bias,
        "        if CAUSAL or kv_len % block_kv:",
        f"            kv_pos = kj * block_kv + lax.broadcasted_iota(jnp.int32, s.shape, {kv_dim})",
        "            valid = kv_pos < kv_len",
        "            if CAUSAL:",
        f"                q_pos = qi * block_q + r0 + lax.broadcasted_iota(jnp.int32, s.shape, {q_dim})",
        "                valid = jnp.logical_and(valid, kv_pos <= q_pos)",
        "            s = jnp.where(valid, s, MASK_VALUE)",
        "        if kv_len % block_kv:  # V rows past kv_len hold anything, and 0 x NaN is NaN",
        f"            v_pos = kj * block_kv + lax.broadcasted_iota(jnp.int32, v.shape, {v_kv})",
        "            v = jnp.where(v_pos < kv_len, v, jnp.zeros_like(v))"]
    zero_v = [  # V rows past kv_len in a tail block hold anything, and 0 x NaN is NaN
        "        if kv_len % block_kv:",
        f"            v_pos = kj * block_kv + lax.broadcasted_iota(jnp.int32, v.shape, {v_kv})",
        "            v = jnp.where(v_pos < kv_len, v, jnp.zeros_like(v))"]
    refs = "q_ref, k_ref, v_ref, b_ref, o_ref" if bias else "q_ref, k_ref, v_ref, o_ref"
    diagonal_arg = ", diagonal=1" if staircase else ""
    head = ["", "", f"def _kernel({refs}, *scratch, scale, block_q, block_kv, kv_len, sub_q{diagonal_arg}):",
            f'    """{summary}: one (q block, KV block) step of the softmax."""',
            f"    qi, kj = pl.program_id({1 if spec.grid_order == 'gq' else 0}), pl.program_id(2)"]
    if narrow:
        head.append("    exact_scale = bool(np.frexp(scale)[0] == 0.5)  # a power of two")
    if spec.kv_in_one_block:
        body = [*head, "    rows, r0 = ..., 0", f"    q = {load_q}", f"    k = {load_k}",
                f"    v = {load_v}", *[line[4:] for line in zero_v], f"    s = {scores}",
                *[line[4:] for line in mask],
                f"    m = jnp.max(s, axis={axis}, keepdims=True)", f"    p = {exp}(s - m)",
                f"    row_sum = jnp.sum(p, axis={axis}, keepdims=True)", f"    p = p{p_cast}",
                f"    acc = {pv.replace(chr(10) + '    ', chr(10))}",
                f"    o_ref[...] = ({finish}).astype(o_ref.dtype)"]
        return "\n".join(body) + "\n"
    acc_ref = "o_ref" if spec.accumulate == "output" else "scratch[2]"
    body = [*head, "    m_ref, l_ref = scratch[0], scratch[1]", f"    acc_ref = {acc_ref}"]
    if spec.hoist_q:
        body.append("    qs_ref = scratch[-1]")
    body += ["", "    @pl.when(kj == 0)", "    def _init():",
             "        m_ref[...] = jnp.full_like(m_ref, MASK_VALUE)",
             "        l_ref[...] = jnp.zeros_like(l_ref)", "        acc_ref[...] = jnp.zeros_like(acc_ref)"]
    if spec.hoist_q:
        q_all = "jnp.swapaxes(q_ref[...], -1, -2)" if seq_on_lanes and rows_layout else "q_ref[...]"
        body.append(f"        qs_ref[...] = {scaled.format(q_all)}.astype(qs_ref.dtype)")
    body += ["", f"    def _update(r0, rows{', kv=...' if staircase else ''}):",
             '        """The online-softmax update of the q rows `rows` (starting at row r0)'
             + (' against the keys `kv` of the block."""' if staircase else '."""'),
             "        q = qs_ref[rows]" if spec.hoist_q else f"        q = {load_q}",
             f"        k = {load_k}", f"        v = {load_v}", *zero_v,
             f"        s = {scores}", *mask,
             "        m_prev = m_ref[rows]",
             f"        m_new = jnp.maximum(m_prev, jnp.max(s, axis={axis}, keepdims=True))",
             f"        alpha = {exp}(m_prev - m_new)", f"        p = {exp}(s - m_new)",
             f"        l_ref[rows] = alpha * l_ref[rows] + jnp.sum(p, axis={axis}, keepdims=True)",
             f"        p = p{p_cast}", f"        pv = {pv}",
             "        acc_ref[rows] = alpha * acc_ref[rows] + pv", "        m_ref[rows] = m_new", ""]
    if spec.sub_q > 1:
        body += ["    rows_per_tile = block_q // sub_q", "",
                 "    def _sub_tile(t, carry):", "        r0 = pl.multiple_of(t * rows_per_tile, rows_per_tile)",
                 "        _update(r0, (pl.ds(r0, rows_per_tile), slice(None)))", "        return carry", "",
                 "    def _step():", "        lax.fori_loop(0, sub_q, _sub_tile, 0, unroll=True)", ""]
    else:
        body += ["    def _step():", "        _update(0, ...)", ""]
    if staircase:  # the q sub-tile t of the diagonal block sees keys [0, (t + 1) * tile)
        seq_axis = ("(..., slice(start, stop))" if seq_on_lanes
                    else "(..., slice(start, stop), slice(None))")
        body += ["    def _seq(start, stop):", f"        return {seq_axis}", "",
                 "    if CAUSAL and diagonal > 1:", "        pl.when(kj < qi)(_step)", "",
                 "        @pl.when(kj == qi)", "        def _diagonal():",
                 "            tile = block_q // diagonal",
                 "            for t in range(diagonal):",
                 "                _update(t * tile, _seq(t * tile, (t + 1) * tile), _seq(0, (t + 1) * tile))",
                 "    elif CAUSAL:"]
    else:
        body += ["    if CAUSAL:"]
    body += ["        pl.when(kj * block_kv <= qi * block_q + block_q - 1)(_step)",
             "    else:", "        _step()", "",
             "    @pl.when(kj == pl.num_programs(2) - 1)", "    def _store():",
             "        acc, row_sum = acc_ref[...], l_ref[...]",
             f"        o_ref[...] = ({finish}).astype(o_ref.dtype)"]
    return "\n".join(body) + "\n"
