// Thread domains and parent domains (ibv_alloc_td(3), ibv_alloc_parent_domain(3)), and the
// memory the provider allocates for objects made on a parent domain.
//
// A parent domain stands in for its PD everywhere a PD is taken: its ibv_pd carries the PD's
// droced id in `handle`, so MRs, windows, AHs, QPs and SRQs made on it belong to that PD in
// droced. What it adds is the application's allocators: the provider's own memory for a CQ,
// QP or SRQ made on it (droce's state behind the object, an extended QP's WR staging) comes
// from its alloc(). The rings do not: they are droced's regions (sealed memfds it maps), as a
// NIC's queues are the NIC's to lay out; memory from the application's allocator could only
// reach droced by copying it into a memfd, which is what the allocator exists to avoid.
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

#include "provider/verbs/objects.h"

namespace droce::verbs {

void* domain_alloc(ibv_pd* pd, size_t size, uint64_t type, DomainMemory* how) {
  *how = DomainMemory{};
  constexpr size_t kAlign = 64;
  VerbsPd* d = parent_domain_of(pd);
  if (d != nullptr && d->alloc != nullptr) {
    void* p = d->alloc(pd, d->pd_context, size, kAlign, type);
    if (p == nullptr) return nullptr;
    if (p != IBV_ALLOCATOR_USE_DEFAULT) {
      how->domain = d;
      how->type = type;
      return p;
    }
  }
  void* p = std::aligned_alloc(kAlign, (size + kAlign - 1) / kAlign * kAlign);
  if (p != nullptr) std::memset(p, 0, size);
  return p;
}

void domain_free(void* p, const DomainMemory& how) {
  if (p == nullptr) return;
  if (how.domain != nullptr) return how.domain->free(how.domain->ibv, how.domain->pd_context, p, how.type);
  std::free(p);
}

}  // namespace droce::verbs

using namespace droce;
using namespace droce::verbs;

extern "C" {

ibv_td* droce_alloc_td(ibv_context* context, ibv_td_init_attr* init_attr) {
  if (init_attr == nullptr || init_attr->comp_mask != 0) return fail<ibv_td>(EINVAL);
  auto* o = new (std::nothrow) Object<ibv_td>();
  auto* v = new (std::nothrow) VerbsTd();
  if (o == nullptr || v == nullptr) {
    delete o;
    delete v;
    return fail<ibv_td>(ENOMEM);
  }
  o->droce = v;
  o->obj.context = context;
  return &o->obj;
}

int droce_dealloc_td(ibv_td* td) {
  auto* v = static_cast<VerbsTd*>(droce_object(td));
  if (v->users.load() != 0) return EBUSY;  // a parent domain uses it
  delete v;
  delete object_of(td);
  return 0;
}

ibv_pd* droce_alloc_parent_domain(ibv_context* context, ibv_parent_domain_init_attr* attr) {
  constexpr uint32_t kKnown = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
  if (attr == nullptr || attr->pd == nullptr || (attr->comp_mask & ~kKnown)) return fail<ibv_pd>(EINVAL);
  // A parent domain is made over a PD of this context, not over another parent domain.
  if (attr->pd->context != context || pd_of(attr->pd)->parent()) return fail<ibv_pd>(EINVAL);
  if (attr->td != nullptr && attr->td->context != context) return fail<ibv_pd>(EINVAL);
  const bool allocators = (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) != 0;
  if (allocators && (attr->alloc == nullptr || attr->free == nullptr)) return fail<ibv_pd>(EINVAL);
  auto* o = new (std::nothrow) Object<ibv_pd>();
  auto* v = new (std::nothrow) VerbsPd();
  if (o == nullptr || v == nullptr) {
    delete o;
    delete v;
    return fail<ibv_pd>(ENOMEM);
  }
  v->ctx = context_of(context);
  v->ibv = &o->obj;
  v->protection_domain = attr->pd;
  v->td = attr->td;
  if (allocators) {
    v->alloc = attr->alloc;
    v->free = attr->free;
  }
  if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT) v->pd_context = attr->pd_context;
  ++pd_of(attr->pd)->users;
  if (attr->td != nullptr) ++static_cast<VerbsTd*>(droce_object(attr->td))->users;
  o->droce = v;
  o->obj.context = context;
  o->obj.handle = attr->pd->handle;  // droced's PD: what every object made on it belongs to
  return &o->obj;
}

}  // extern "C"

namespace droce::verbs {

int dealloc_parent_domain(ibv_pd* pd) {
  VerbsPd* v = pd_of(pd);
  if (v->users.load() != 0) return EBUSY;  // CQs, QPs or SRQs made on it
  --pd_of(v->protection_domain)->users;
  if (v->td != nullptr) --static_cast<VerbsTd*>(droce_object(v->td))->users;
  delete v;
  delete object_of(pd);
  return 0;
}

}  // namespace droce::verbs
