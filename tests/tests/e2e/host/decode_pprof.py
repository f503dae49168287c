# Independent pprof decoder: profile.proto's messages (the fields used) declared with the
# protobuf package's descriptor API (no protoc), parsed, and the function with the most
# leaf value printed as "TOP <name> <value> <samples>".
import sys
from google.protobuf import descriptor_pb2, descriptor_pool
try:
    from google.protobuf.message_factory import GetMessageClass
except ImportError:
    GetMessageClass = None
    from google.protobuf import message_factory

F = descriptor_pb2.FieldDescriptorProto
fdp = descriptor_pb2.FileDescriptorProto(name="profile.proto", package="perftools.profiles", syntax="proto3")
def msg(name, fields):
    m = fdp.message_type.add(name=name)
    for (fname, num, typ, label, tname) in fields:
        f = m.field.add(name=fname, number=num, type=typ, label=label)
        if tname:
            f.type_name = ".perftools.profiles." + tname
R, O = F.LABEL_REPEATED, F.LABEL_OPTIONAL
msg("ValueType", [("type", 1, F.TYPE_INT64, O, None), ("unit", 2, F.TYPE_INT64, O, None)])
msg("Sample", [("location_id", 1, F.TYPE_UINT64, R, None), ("value", 2, F.TYPE_INT64, R, None)])
msg("Mapping", [("id", 1, F.TYPE_UINT64, O, None), ("memory_start", 2, F.TYPE_UINT64, O, None),
                ("memory_limit", 3, F.TYPE_UINT64, O, None), ("file_offset", 4, F.TYPE_UINT64, O, None),
                ("filename", 5, F.TYPE_INT64, O, None), ("build_id", 6, F.TYPE_INT64, O, None),
                ("has_functions", 7, F.TYPE_BOOL, O, None)])
msg("Line", [("function_id", 1, F.TYPE_UINT64, O, None), ("line", 2, F.TYPE_INT64, O, None)])
msg("Location", [("id", 1, F.TYPE_UINT64, O, None), ("mapping_id", 2, F.TYPE_UINT64, O, None),
                 ("address", 3, F.TYPE_UINT64, O, None), ("line", 4, F.TYPE_MESSAGE, R, "Line")])
msg("Function", [("id", 1, F.TYPE_UINT64, O, None), ("name", 2, F.TYPE_INT64, O, None),
                 ("system_name", 3, F.TYPE_INT64, O, None), ("filename", 4, F.TYPE_INT64, O, None)])
msg("Profile", [("sample_type", 1, F.TYPE_MESSAGE, R, "ValueType"), ("sample", 2, F.TYPE_MESSAGE, R, "Sample"),
                ("mapping", 3, F.TYPE_MESSAGE, R, "Mapping"), ("location", 4, F.TYPE_MESSAGE, R, "Location"),
                ("function", 5, F.TYPE_MESSAGE, R, "Function"), ("string_table", 6, F.TYPE_STRING, R, None),
                ("period_type", 11, F.TYPE_MESSAGE, O, "ValueType"), ("period", 12, F.TYPE_INT64, O, None),
                ("default_sample_type", 14, F.TYPE_INT64, O, None)])
pool = descriptor_pool.DescriptorPool()
pool.Add(fdp)
desc = pool.FindMessageTypeByName("perftools.profiles.Profile")
Profile = GetMessageClass(desc) if GetMessageClass else message_factory.MessageFactory(pool).GetPrototype(desc)
p = Profile()
p.ParseFromString(open(sys.argv[1], "rb").read())
st = p.string_table
assert st[0] == "", "string_table[0] must be empty"
funcs = {f.id: st[f.name] for f in p.function}
locs = {l.id: l for l in p.location}
total = {}
for s in p.sample:
    leaf = locs[s.location_id[0]]
    name = funcs[leaf.line[0].function_id]
    total[name] = total.get(name, 0) + s.value[0]
top = max(total.items(), key=lambda kv: kv[1])
print("TYPE", st[p.sample_type[0].type], st[p.sample_type[0].unit])
print("BUILD_ID", st[p.mapping[0].build_id])
print("TOP", top[0], top[1], len(p.sample))
